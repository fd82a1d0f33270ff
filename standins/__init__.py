"""Stand-in jobs: the tiny trainers (numpy; PyTorch DCP under torchrun), a toy model server and
its client, synthetic checkpoints. Real processes that the dry run, the drills and the demo
run in place of a user's job; nothing in the core imports them."""
