"""Post-training: supervised fine-tuning (SFT) and preference tuning (DPO) as steps, their data, and chat.

A post-training step builds its run's parts and hands them to the trainer as a recipe
(:mod:`glasslab.train.recipe`); ``train/`` imports nothing from here. Modules, in import order:

- ``records`` (JSONL records: validation, problems counted, held-out split, the data folder), ``instructions``
  (the built-in instruction set), ``conversations`` (SFT data: a conversations folder as a step), ``pairs``
  (DPO data: preference pairs, the built-in pairs, a pairs folder as a step);
- ``fitting`` (conversations longer than a row: cut at a turn boundary or left out, counted), ``packing``
  (SFT rows and their loader), ``preference`` (the DPO objective, pair batches and their loader);
- ``samples`` (chat samples), ``base`` (the base model: weights, tokenizer, forgetting evals, baseline);
- ``tuning`` (the one tuning step every method runs, and the step config and recipe a method extends);
- ``sft`` and ``dpo`` (each method's config and recipe), ``outcome`` (a finished run before and after),
  ``plans`` (the steps of ``glasslab sft`` and ``glasslab dpo``), ``chat`` (chat sessions for the terminal
  and the observatory's chat panel).
"""
