# Copyright: trainstack maintainers
# Apache License 2.0 (see galaxy.yml)
"""The file layer: how the product reads its own data files (stacks, rules, cluster specs, test case
manifests). YAML's default is that a repeated key silently wins over the first one, which turns a typo or a
pasted block into a setting nobody wrote; everything here refuses that instead, naming the file, the key and
both lines. A base layer: it imports nothing else of module_utils.
"""
