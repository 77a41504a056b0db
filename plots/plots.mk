# plots/plots.mk: `make plots` redraws every figure in docs/figures/ from the results committed
# under experiments/results/ (each experiment script's `plot` phase), without simulating
# anything. To rerun the simulations too: experiments/run_all.sh.
EXPERIMENT_SCRIPTS := $(filter-out experiments/lib.sh experiments/run_all.sh,$(sort $(wildcard experiments/*.sh)))

plots:
	@for s in $(EXPERIMENT_SCRIPTS); do bash $$s plot || exit 1; done
	@echo "plots: figures in docs/figures/"
