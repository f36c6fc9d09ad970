"""Two experts' worth of LoRA training examples and parameters that train in seconds on the tiny LM (not a test module)."""

from experts.ml.extractive import Passage
from experts.ml.lora_examples import Example

DMV = [
    Example("How do I renew my driver license?", "Renew it online at the DMV website before it expires [1].", [Passage("Renew a license online at the DMV.", "Renewals", score=0.8)]),
    Example("Where do I register a car?", "Register the vehicle at a DMV office with proof of insurance [1].", [Passage("Registration needs insurance.", "Registration", score=0.7)]),
    Example("When does my inspection expire?", "Inspections expire the last day of the month on the sticker [1].", [Passage("Inspection stickers expire monthly.", "Inspections", score=0.9)]),
    Example("Can I get a learner permit at 16?", "Yes, at 16 you may apply for a learner permit [1].", [Passage("Learner permits from 16.", "Permits", score=0.6)]),
]
SSA = [
    Example("How do I apply for retirement benefits?", "Apply for Social Security retirement benefits online or by phone.", []),
    Example("When can I start my pension?", "Social Security retirement can start at age 62 with reduced benefits.", []),
    Example("What is Medicare?", "Medicare is health insurance for people 65 or older.", []),
    Example("How do I replace my card?", "Replace a Social Security card online with your account.", []),
]
FAST = dict(rank=4, alpha=8, dropout=0.0, epochs=1, max_steps=4, batch_size=2, max_length=128, learning_rate=5e-2, checkpoint_steps=2,
            target_modules=["q_proj", "v_proj"], top_layers=0)
