"""Berth's side of a Slurm cluster (issue 35): Slurm's own commands run bounded (`commands.py`), what they print
read into typed records (`records.py`), and a copy's batch job rendered from typed values (`job_script.py`).
Ground floor: imports nothing of Berth above berth.errors and berth.settings."""
