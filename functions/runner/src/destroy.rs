//! Tearing a finished deployment down: `terraform destroy` for every Terraform step that ran.
