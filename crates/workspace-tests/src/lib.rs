//! No code: the checks are in `tests/` (they read the workspace's manifests).
