# make demo   runs a real deployment on the embedded engine and shows its result
# make test   runs every test
# make bench  prints the benchmark figures
# make local-aws       starts the AWS form locally (emulator, stack, functions, poller) on 127.0.0.1
# make local-aws-down  stops it
.PHONY: setup build demo test bench clean local-aws local-aws-down

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

local-aws: setup
	@scripts/local-aws.sh up

local-aws-down:
	@scripts/local-aws.sh down

clean:
	cargo clean
