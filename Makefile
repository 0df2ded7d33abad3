# make demo   runs a real deployment on the embedded engine and shows its result
# make test   runs every test
# make bench  prints the benchmark figures
.PHONY: setup build demo test bench clean

setup:
	@scripts/setup.sh

build: setup
	cargo build --release -p overture

demo: build
	@scripts/demo.sh

test: setup
	scripts/check-pure.sh
	scripts/check-stack.sh
	cargo test --workspace --no-fail-fast

bench: setup
	cargo build --release -p overture -p overture-bench
	target/release/overture-bench

clean:
	cargo clean
