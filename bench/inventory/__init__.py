"""ec2_cluster against amazon.aws.aws_ec2 on a moto fleet: ``python -m bench.inventory.run``."""
