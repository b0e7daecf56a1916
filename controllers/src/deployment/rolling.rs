//! Rolling-update arithmetic, pure: maxSurge/maxUnavailable with Kubernetes' rounding, how far the
//! new ReplicaSet may grow, and how far the old ones may shrink without dropping below availability.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid value for IntOrString: {0:?}")]
pub struct BadIntOrPercent(pub String);

/// apimachinery's GetScaledValueFromIntOrPercent: a number as is, a percentage of `total` rounded
/// up or down.
pub fn scaled(v: &IntOrString, total: i32, round_up: bool) -> Result<i32, BadIntOrPercent> {
    match v {
        IntOrString::Int(n) => Ok(*n),
        IntOrString::String(s) => {
            let pct: i64 =
                s.strip_suffix('%').and_then(|p| p.parse().ok()).ok_or_else(|| BadIntOrPercent(s.clone()))?;
            let x = pct * i64::from(total);
            let v = if round_up { (x + 99).div_euclid(100) } else { x.div_euclid(100) };
            i32::try_from(v).map_err(|_| BadIntOrPercent(s.clone()))
        }
    }
}

/// (maxSurge, maxUnavailable) for `replicas`: surge rounds up, unavailable down; both zero would
/// deadlock, so unavailable becomes 1 (Kubernetes' ResolveFenceposts). Defaults: 25% each.
pub fn resolve_fenceposts(
    max_surge: Option<&IntOrString>,
    max_unavailable: Option<&IntOrString>,
    replicas: i32,
) -> Result<(i32, i32), BadIntOrPercent> {
    let quarter = IntOrString::String("25%".into());
    let surge = scaled(max_surge.unwrap_or(&quarter), replicas, true)?;
    let unavailable = scaled(max_unavailable.unwrap_or(&quarter), replicas, false)?;
    if surge == 0 && unavailable == 0 {
        return Ok((0, 1));
    }
    Ok((surge, unavailable))
}

/// A ReplicaSet as the rollout sees it: desired size and available pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rs {
    pub replicas: i32,
    pub available: i32,
}

/// The new ReplicaSet's size this step (Kubernetes' NewRSNewReplicas for RollingUpdate): grow
/// toward `replicas` while all pods stay within `replicas + surge`; shrink to `replicas` if above.
pub fn new_rs_replicas(replicas: i32, surge: i32, new: i32, olds: &[Rs]) -> i32 {
    if new >= replicas {
        return replicas;
    }
    let total: i32 = new + olds.iter().map(|r| r.replicas).sum::<i32>();
    let max_total = replicas + surge;
    if total >= max_total {
        return new;
    }
    new + (max_total - total).min(replicas - new)
}

/// The old ReplicaSets' sizes after this step (`olds` oldest first): first drop unhealthy
/// (unavailable) pods, then available ones, never below `replicas - unavailable` available pods.
pub fn scale_down_olds(replicas: i32, unavailable: i32, new: Rs, olds: &[Rs]) -> Vec<i32> {
    let mut sizes: Vec<i32> = olds.iter().map(|r| r.replicas).collect();
    let old_total: i32 = sizes.iter().sum();
    if old_total == 0 {
        return sizes;
    }
    let min_available = replicas - unavailable;
    let new_unavailable = (new.replicas - new.available).max(0);
    let max_scaled_down = old_total + new.replicas - min_available - new_unavailable;
    if max_scaled_down <= 0 {
        return sizes;
    }
    // Unhealthy pods first: removing them costs no availability.
    let mut done = 0;
    for (size, rs) in sizes.iter_mut().zip(olds) {
        if done >= max_scaled_down {
            break;
        }
        let unhealthy = (*size - rs.available).max(0);
        let n = unhealthy.min(max_scaled_down - done);
        *size -= n;
        done += n;
    }
    // Then available pods, as far as availability allows.
    let available: i32 = new.available + olds.iter().map(|r| r.available).sum::<i32>();
    if available <= min_available {
        return sizes;
    }
    let mut budget = available - min_available;
    for size in sizes.iter_mut() {
        if budget <= 0 {
            break;
        }
        let n = (*size).min(budget);
        *size -= n;
        budget -= n;
    }
    sizes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> IntOrString {
        IntOrString::String(v.into())
    }

    #[test]
    fn percentages_round_like_kubernetes() {
        let cases = [
            (s("25%"), 10, true, 3),
            (s("25%"), 10, false, 2),
            (s("50%"), 3, true, 2),
            (s("50%"), 3, false, 1),
            (s("0%"), 7, true, 0),
            (s("100%"), 7, false, 7),
            (IntOrString::Int(4), 10, false, 4),
        ];
        for (v, total, up, want) in cases {
            assert_eq!(scaled(&v, total, up), Ok(want), "{v:?} of {total} up={up}");
        }
        assert!(scaled(&s("abc"), 10, true).is_err());
        assert!(scaled(&s("10"), 10, true).is_err());
    }

    #[test]
    fn fenceposts() {
        let cases = [
            (None, None, 4, (1, 1)),
            (None, None, 10, (3, 2)),
            (None, None, 1, (1, 0)),
            (Some(IntOrString::Int(0)), Some(IntOrString::Int(0)), 3, (0, 1)),
            (Some(s("0%")), Some(s("10%")), 5, (0, 1)),
            (Some(IntOrString::Int(2)), Some(s("50%")), 5, (2, 2)),
        ];
        for (surge, unavail, replicas, want) in cases {
            assert_eq!(resolve_fenceposts(surge.as_ref(), unavail.as_ref(), replicas), Ok(want), "{replicas}");
        }
    }

    #[test]
    fn new_replica_set_grows_within_surge() {
        let old = |n| Rs { replicas: n, available: n };
        assert_eq!(new_rs_replicas(3, 1, 0, &[old(3)]), 1, "one surge pod");
        assert_eq!(new_rs_replicas(3, 1, 1, &[old(3)]), 1, "at the cap");
        assert_eq!(new_rs_replicas(3, 1, 1, &[old(2)]), 2);
        assert_eq!(new_rs_replicas(10, 3, 0, &[old(10)]), 3);
        assert_eq!(new_rs_replicas(3, 1, 0, &[]), 3, "a fresh deployment starts at full size");
        assert_eq!(new_rs_replicas(3, 0, 0, &[old(3)]), 0, "no surge: wait for the old to shrink");
        assert_eq!(new_rs_replicas(3, 1, 5, &[]), 3, "scaled down");
    }

    #[test]
    fn old_replica_sets_shrink_within_max_unavailable() {
        let rs = |replicas, available| Rs { replicas, available };
        // 3 replicas, surge 1, unavailable 0: new has 1 unavailable pod -> nothing may go yet.
        assert_eq!(scale_down_olds(3, 0, rs(1, 0), &[rs(3, 3)]), vec![3]);
        // The new pod became available -> one old may go.
        assert_eq!(scale_down_olds(3, 0, rs(1, 1), &[rs(3, 3)]), vec![2]);
        // unavailable 1, new not yet available: one old may go at once.
        assert_eq!(scale_down_olds(3, 1, rs(1, 0), &[rs(3, 3)]), vec![2]);
        // Unhealthy old pods go first, even while availability is short.
        assert_eq!(scale_down_olds(3, 0, rs(1, 1), &[rs(3, 1)]), vec![2]);
        // No room at all while the new pod is unavailable and nothing may be unavailable.
        assert_eq!(scale_down_olds(3, 0, rs(1, 0), &[rs(3, 1)]), vec![3]);
        // Oldest first across several old sets.
        assert_eq!(scale_down_olds(4, 0, rs(4, 4), &[rs(2, 2), rs(2, 2)]), vec![0, 0]);
        assert_eq!(scale_down_olds(4, 1, rs(1, 1), &[rs(2, 2), rs(2, 2)]), vec![0, 2]);
        assert_eq!(scale_down_olds(3, 1, rs(0, 0), &[]), Vec::<i32>::new());
    }
}
