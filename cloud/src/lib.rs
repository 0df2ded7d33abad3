//! The local cloud: the OpenStack subset Overture uses, on one machine (see `API.md`).
