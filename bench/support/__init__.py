"""What benchmarks and tests both need to drive the lab and its stand-ins: how to reach the lab's nodes and
run the collection from this checkout (``lab``), a moto server playing AWS (``moto``), and clusters built in
it the way the real services tag them (``moto_fleet``); what the benchmarks share among themselves: one run of
a test case as a child (``train_run``) and matplotlib when it is there (``plotting``). tests/support/
re-exports the lab's and moto's names, so a test and a benchmark start the same moto server and reach a node
the same way. Imports go one way: these modules use each other, the standard library, boto3 and matplotlib,
never tests/.
"""
