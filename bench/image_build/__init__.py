"""Local image build time, cold against warm: ``python -m bench.image_build.bench_image_build``."""
