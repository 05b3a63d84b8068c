"""Flow control: the byte budget and the pause/resume decisions that keep memory bounded."""
