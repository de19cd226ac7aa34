# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""The options the cluster modules share, documented once.

DOCUMENTATION is what every module that makes a cluster from a cluster spec takes (batch_cluster,
eks_cluster, hyperpod_cluster, pcs_cluster): the spec and O(render_only). WAIT is how every module that waits
for AWS waits (those four and fsx_lustre); module_utils/aws/wait.py holds the rules it describes. A module
whose service is quicker states its own O(wait_timeout) default in its own options.
"""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  path:
    description:
      - The cluster spec file; give this or O(spec). It is checked exactly as
        M(trainstack.cluster.cluster_spec) checks it, and a spec with problems fails the module naming each,
        before any AWS client exists.
    type: path
  spec:
    description: A spec as a mapping (for example C(cluster_spec)'s returned C(spec)); checked again.
    type: dict
  stacks_dir:
    description: The directory of the stack files the spec's C(image.stack) names (default the collection's).
    type: path
  render_only:
    description:
      - Render and validate the requests only (against botocore's model of the service); read nothing from
        AWS and send nothing. Only with O(state=present).
    type: bool
    default: false
notes:
  - Supports check mode; it reads what exists and reports what it would create, change or delete, and waits
    for nothing.
  - The requests go to the spec's C(region); O(region) (and C(AWS_REGION)) are not used.
"""

    WAIT = r"""
options:
  wait:
    description:
      - Wait until what was created or changed is ready, or what was deleted is gone. With C(false), the
        module still waits where a later request needs an earlier one done (a cluster before its node groups,
        a node group deleted before its cluster), and returns once the last request is sent.
    type: bool
    default: true
  wait_timeout:
    description:
      - Seconds all the waits of one run may take together; more than 0. When they run out, the module fails
        naming what it waited for and the status it saw last; AWS goes on, and running the task again waits
        once more.
    type: int
    default: 3600
  poll_interval:
    description:
      - Seconds between two looks at a resource being made or deleted; more than 0, and never less than 1.
      - Left out, the module's own pace for its service (see its notes).
    type: int
notes:
  - Throttled AWS calls are retried by botocore (standard retry mode, up to 10 attempts); O(aws_config) can
    change that.
"""
