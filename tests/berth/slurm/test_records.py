"""What Slurm's commands print, read into records: only lines of the expected shape, states and exit codes split."""

from __future__ import annotations

from berth.slurm.records import parse_accounting, parse_nodes, parse_queue


def test_queue_lines_become_jobs_and_other_lines_are_skipped() -> None:
    text = ("12|berth-c1|PENDING|Resources||2|n/a\n"
            "13|berth-c2|RUNNING|None|n[1-2]|2|n1\n"
            "squeue: error: something\n"
            "14|other|COMPLETING|None|n3|1|n3\n")
    jobs = parse_queue(text)
    assert [j.job_id for j in jobs] == [12, 13, 14]
    assert jobs[0].pending and not jobs[0].running and jobs[0].reason == "Resources" and jobs[0].batch_host == ""
    assert jobs[1].running and jobs[1].nodes == "n[1-2]" and jobs[1].node_count == 2 and jobs[1].batch_host == "n1"
    assert jobs[2].running  # COMPLETING: its processes may still run


def test_accounting_lines_give_state_exit_status_and_signal_of_whole_jobs() -> None:
    text = ("7|berth-c1|FAILED|1:0|n[1-2]|2026-12-06T07:46:43|2026-12-06T07:46:45\n"
            "7.0|bash|FAILED|1:0|n[1-2]|2026-12-06T07:46:43|2026-12-06T07:46:45\n"
            "8|berth-c2|CANCELLED by 0|0:15|n1|2026-12-06T07:47:00|2026-12-06T07:47:05\n")
    jobs = parse_accounting(text)
    assert [(j.job_id, j.state, j.exit_status, j.signal) for j in jobs] == [(7, "FAILED", 1, 0),
                                                                           (8, "CANCELLED", 0, 15)]


def test_a_record_is_an_ending_only_when_final_with_an_end_time() -> None:
    """slurmdbd shows a job whose steps reached it before slurmctld's record as a placeholder for a moment."""
    placeholder, running, ended = parse_accounting(
        "9|allocation|PENDING|0:0|n1|2026-12-06T11:38:27|Unknown\n"
        "10|berth-c1|RUNNING|0:0|n[1-2]|2026-12-06T11:38:27|Unknown\n"
        "11|berth-c1|FAILED|9:0|n[1-2]|2026-12-06T11:38:27|2026-12-06T11:38:28\n")
    assert not placeholder.ended and not running.ended and ended.ended


def test_nodes_with_gres_of_several_forms() -> None:
    text = ("NodeName=n1 Arch=x86_64 CPUTot=8 Gres=gpu:a100:4(S:0-1) NodeAddr=10.0.0.1 NodeHostName=gpu01 "
            "OS=Linux 6.1 #1 SMP RealMemory=64000 State=MIXED Partitions=gpu,debug\n"
            "NodeName=n2 CPUTot=4 Gres=(null) NodeAddr=10.0.0.2 NodeHostName=cpu01 RealMemory=1000 State=IDLE "
            "Partitions=cpu\n")
    first, second = parse_nodes(text)
    assert (first.name, first.address, first.hostname, first.gpus, first.cpus, first.memory_mb) == (
        "n1", "10.0.0.1", "gpu01", 4, 8, 64000)
    assert first.partitions == ("gpu", "debug") and first.state == "MIXED"
    assert second.gpus == 0 and second.gres == ""
