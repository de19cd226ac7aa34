# Training test case catalog (testcases/). Included by the Makefile.
# The GPU benchmarks run on a GPU machine with its own Python (see docs/performance.md); here they need a GPU.
TESTCASE_CONFIG ?= tiny
TESTCASE_STEPS  ?= 20

.PHONY: test-testcases testcase-fsdp testcase-nccl bench-train-throughput
test-testcases: setup ## CPU unit tests of the test case catalog (fsdp, ddp, nccl/collectives, torchtitan rules; gloo)
	$(BIN)/pytest tests/unit/testcases -m "not slow" $(PYTEST_ARGS)

testcase-fsdp: setup ## run pytorch/fsdp on 2 local CPU processes (TESTCASE_CONFIG=tiny, TESTCASE_STEPS=20)
	cd testcases/pytorch/fsdp && OMP_NUM_THREADS=1 $(BIN)/torchrun --standalone --nproc-per-node 2 train.py \
	  --config $(TESTCASE_CONFIG) --steps $(TESTCASE_STEPS) --summary-json $(CURDIR)/build/testcases/fsdp.json

testcase-nccl: setup ## run nccl/collectives on 2 local CPU processes (gloo), up to 1 MiB
	cd testcases/nccl/collectives && OMP_NUM_THREADS=1 $(BIN)/torchrun --standalone --nproc-per-node 2 \
	  collectives.py --max-bytes 1M --summary-json $(CURDIR)/build/testcases/nccl.json

bench-train-throughput: setup ## HF eager/FSDP2/compile vs ours on one GPU (needs CUDA; JSON in bench/results/)
	$(PY) -m bench.train_throughput --profile --output bench/results/train_throughput_llama3_2_1b.json
