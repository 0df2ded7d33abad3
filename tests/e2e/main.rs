//! End-to-end tests of the overture program.
