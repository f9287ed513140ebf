"""Stack sampler for ``benchmarks/start_timeline.py``: with ``SAMPLE_OUT`` set, every Python process that starts with
this folder on ``PYTHONPATH`` (the training process, its fork server, the workers forked from it, the compile
workers) writes its main thread's stack every ``SAMPLE_PERIOD`` seconds to ``SAMPLE_OUT.<pid>.txt``, in seconds from
``SAMPLE_T0``. Python imports a ``sitecustomize`` module at start-up by itself; without ``SAMPLE_OUT`` this one does
nothing."""

import os

if os.environ.get("SAMPLE_OUT"):
    import sys
    import threading
    import time

    _T0 = float(os.environ.get("SAMPLE_T0") or time.time())
    _PERIOD = float(os.environ.get("SAMPLE_PERIOD", "0.2"))
    _PREFIXES = ("site-packages/", "site_bundle/", "source/", "scripts/", "benchmarks/", "lib/python3.12/")

    def _short(filename: str) -> str:
        for prefix in _PREFIXES:
            if prefix in filename:
                return filename.split(prefix, 1)[1]
        return filename

    def _sample(role: str) -> None:
        main = threading.main_thread().ident
        with open(f"{os.environ['SAMPLE_OUT']}.{os.getpid()}.txt", "a") as out:
            out.write(f"# pid {os.getpid()} ppid {os.getppid()} {role} {sys.argv[:4]} at {time.time() - _T0:.2f}\n")
            while True:
                time.sleep(_PERIOD)
                frame = sys._current_frames().get(main)
                frames = []
                while frame is not None and len(frames) < 16:  # innermost first; no file is read here
                    code = frame.f_code
                    if not code.co_filename.startswith("<frozen"):
                        frames.append(f"{_short(code.co_filename)}:{frame.f_lineno}:{code.co_name}")
                    frame = frame.f_back
                out.write(f"{time.time() - _T0:8.2f} | " + " < ".join(frames) + "\n")
                out.flush()

    def _start(role: str) -> None:
        threading.Thread(target=_sample, args=(role,), daemon=True, name="stack-sampler").start()

    os.register_at_fork(after_in_child=lambda: _start("forked"))
    _start("started")
