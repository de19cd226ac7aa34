"""GPU measurements on a lent machine: what it is given and how its runs are collected."""
