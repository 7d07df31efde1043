"""The ``--stats`` report: a summary per run and a table per window, on stderr."""

from __future__ import annotations


def print_stats(runs, stream) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=stream, soft_wrap=True, highlight=False)
    for run in runs:
        s = run.summary()
        console.print(f"[bold]{s['source']}[/]  decoder={s['decoder']}  "
                      f"search={s.get('search', 'greedy')}  target={s['target']}"
                      + (f"  drafter={s['drafter']}" if s["drafter"] else "")
                      + f"  threads={s['threads']}"
                      + (f"  encoder={s['encoder']}" if s.get("encoder") else "")
                      + ("  int8=exact twins (u8u8)" if s.get("int8_twins") else ""))
        console.print(
            f"  audio {s['audio_seconds']:.2f} s  wall {s['wall_seconds']:.2f} s  "
            f"real-time factor {s['real_time_factor']:.1f}x  windows {s['windows']}")
        console.print(
            f"  decoding: {s['committed_tokens']} tokens in {s['decode_seconds']:.3f} s = "
            f"{s['tokens_per_second']:.1f} tokens/s, {s['target_passes']} target passes "
            f"({s['tokens_per_pass']:.2f} tokens/pass, {s['passes_alone']} alone)")
        if s.get("beam_steps"):
            console.print(f"  beam: {s['beam_steps']} beam steps in {s['target_passes']} passes "
                          f"({s['beam_steps_per_pass']:.2f} steps/pass)")
        if s.get("dropped_decodes"):
            console.print(
                f"  not kept: {s['dropped_decodes']} decodes (temperature fallback, samples, "
                f"retries), {s['dropped_tokens']} tokens, {s['dropped_passes']} target passes "
                "beyond the kept decodes' (a fallback's samples, decoded side by side, share "
                "passes), their time in the decode time")
        if s["candidates_offered"]:
            console.print(
                f"  candidates: {s['candidates_accepted']}/{s['candidates_offered']} accepted "
                f"(acceptance {s['acceptance']:.2f})")
        console.print(f"  time: encode {s['encode_seconds']:.3f} s, decode "
                      f"{s['decode_seconds']:.3f} s"
                      + (f", drafter {s['draft_seconds']:.3f} s" if s["drafter"] else ""))
        if len(run.windows) > 1 or run.windows and run.windows[0].offered:
            t = Table(show_edge=False, pad_edge=False)
            for col in ("window", "audio", "tokens", "passes", "tok/s", "offered", "accepted",
                        "accept%", "alone", "encode s", "decode s"):
                t.add_column(col, justify="right")
            for w in run.windows:
                t.add_row(str(w.window), f"{w.start:.1f}-{w.end:.1f}", str(w.tokens),
                          str(w.passes), f"{w.tokens_per_second:.0f}", str(w.offered),
                          str(w.accepted), f"{100 * w.acceptance:.0f}" if w.offered else "-",
                          str(w.alone), f"{w.encode_seconds:.3f}", f"{w.decode_seconds:.3f}")
            console.print(t)
