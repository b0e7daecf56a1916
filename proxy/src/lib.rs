//! kaji-proxy: not built yet — the issue for this component lays it down.
