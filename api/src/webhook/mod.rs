//! Admission webhooks (Kubernetes' `k8s.io/apiserver/pkg/admission/plugin/webhook`), the pure
//! part: which webhooks a request goes to, the AdmissionReview sent, and what the answer means.
//! The apiserver's `admission::webhook` resolves, calls and applies.

pub mod conditions;
pub mod matching;
pub mod policy;
pub mod review;
