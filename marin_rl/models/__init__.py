"""Policy networks: the tiny model's char tokenizer (`tokenizer`), Levanter models from config or HF (`policy`),
HF-format import/export (`hf_io`)."""
