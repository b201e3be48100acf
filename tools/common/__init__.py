"""What the tools share: reading results (`results`) and timing GPU work in turn (`timing`)."""
