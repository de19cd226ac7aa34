"""GPU measurements on a machine without network: what it is given and how its runs are collected."""
