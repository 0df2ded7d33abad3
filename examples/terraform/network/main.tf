# Stands in for real cloud resources: `terraform_data` is built into Terraform and keeps its
# `input` in the state, so it needs no provider download and no network.

variable "environment" {
  type = string
}

variable "cidr" {
  type = string
}

variable "zones" {
  type = number
}

resource "terraform_data" "network" {
  input = {
    name = "${var.environment}-net"
    cidr = var.cidr
  }

  # Shows in the destroy log (`logs/<deployment>/network/destroy.log` in the data directory).
  provisioner "local-exec" {
    when    = destroy
    command = "echo releasing network ${self.output.name}"
  }
}

resource "terraform_data" "subnet" {
  count            = var.zones
  input            = cidrsubnet(var.cidr, 8, count.index)
  triggers_replace = [terraform_data.network.id]
}

output "name" {
  value = terraform_data.network.output.name
}

output "subnets" {
  value = terraform_data.subnet[*].output
}
