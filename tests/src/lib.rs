//! End-to-end scenarios on a real lab (come with the lab issue).
