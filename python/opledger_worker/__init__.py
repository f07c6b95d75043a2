"""The worker side of opledger's worker protocol (version 1): serve your functions to opledger.

opledger starts a worker once per spec, writes the workload's input tensors as .npy files, and
asks it, over JSON lines on a socket of its own (file descriptor OPLEDGER_WORKER_FD, not stdout),
to set a function up, run it (timing each run itself), and write its output as .npy. A worker:

    from opledger_worker import Worker
    import numpy as np

    worker = Worker(device="cpu")

    @worker.function("fused")
    def fused(x, bias):                  # input tensors by the names of the kind's ledger
        return gelu(x + bias)

    worker.serve()

Standard library and NumPy only. On a GPU say `Worker(device="cuda")`: runs are then timed with
CUDA events (PyTorch or CuPy, whichever is installed) by opledger's rule for GPU samples (behind
a hold kernel, after the whole device is synchronised: work on a side stream is timed), the cache
flush reads a device buffer twice the L2, and outputs that are torch or cupy tensors are copied back. A `prepare` function
turns the NumPy inputs into what the function takes (device tensors, say) once, before timing:

    @worker.function("eager", prepare=lambda **t: {k: torch.from_numpy(v).cuda() for k, v in t.items()})

The protocol is documented in docs/workers.md; this module is its reference implementation.
"""

import inspect
import json
import os
import socket
import sys
import time
import traceback

import numpy as np

PROTOCOL = 1
__version__ = "2"


#: The most runs one `run` request may ask for.
MAX_RUN_COUNT = 1_000_000


def _run_count(r):
    """A run request's count: a whole number from 1 to MAX_RUN_COUNT (1e300 would never
    answer, and -5 would answer with no run at all)."""
    c = r.get("count", 1)
    whole = isinstance(c, int) or (isinstance(c, float) and c.is_integer())
    if isinstance(c, bool) or not whole or not 1 <= c <= MAX_RUN_COUNT:
        raise ValueError(f"run's count must be a whole number from 1 to {MAX_RUN_COUNT}; got {c!r}")
    return int(c)


class Worker:
    def __init__(self, device="cpu"):
        self.device = device
        self.functions = {}
        self.cases = {}
        self._flush = None
        self._timer = None

    def function(self, name, prepare=None):
        """Registers `fn` under `name` (what a spec names in `function:`)."""

        def register(fn):
            self.functions[name] = (fn, prepare)
            return fn

        return register

    def serve(self):
        """Answers opledger's requests until it says shutdown or closes the channel."""
        fd = os.environ.get("OPLEDGER_WORKER_FD")
        if fd is None:
            sys.exit("opledger_worker: OPLEDGER_WORKER_FD is not set: this program is a worker that opledger starts")
        channel = socket.socket(fileno=int(fd))
        # Raw bytes and one send per reply: the round trip is what the protocol adds to every
        # sample, so it carries no text-layer buffering.
        pending = b""
        while True:
            while b"\n" not in pending:
                chunk = channel.recv(1 << 16)
                if not chunk:
                    return
                pending += chunk
            line, pending = pending.split(b"\n", 1)
            op = None
            try:
                request = json.loads(line)
                op = request.get("op")
                reply = self._handle(request)
            except Exception as e:  # every failure goes back as a reply, with its place
                tb = traceback.format_exc(limit=-3)
                reply = {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": tb}
            channel.sendall(json.dumps(reply).encode() + b"\n")
            if op == "shutdown":
                return

    # ---- requests ----

    def _handle(self, r):
        op = r.get("op")
        if op == "hello":
            if r.get("protocol") != PROTOCOL:
                raise ValueError(f"protocol {r.get('protocol')} asked; this worker speaks {PROTOCOL}")
            return {
                "ok": True,
                "protocol": PROTOCOL,
                "worker": f"opledger_worker.py {__version__} (Python {sys.version.split()[0]}, NumPy {np.__version__})",
                "device": self.device,
                "functions": sorted(self.functions),
            }
        if op == "setup":
            return self._setup(r)
        if op == "run":
            case = self._case(r)
            if r.get("counted"):
                if _run_count(r) != 1:
                    raise ValueError("a counted run is one run: count must be 1")
                case["result"], t = self._counted(case)
                return {"ok": True, "secs": [t]}
            secs = []
            for _ in range(_run_count(r)):
                # Cold: the caches are flushed before every run of the batch, not once.
                case["result"], t = self._timed(case["fn"], case["args"], cold=bool(r.get("cold")))
                secs.append(t)
            return {"ok": True, "secs": secs}
        if op == "output":
            case = self._case(r)
            if case.get("result") is None:
                raise RuntimeError("output asked before the function ran")
            out = _to_numpy(case["result"])
            np.save(case["output"], np.ascontiguousarray(out))
            return {"ok": True}
        if op == "shutdown":
            return {"ok": True}
        raise ValueError(f"unknown op {op!r}")

    def _setup(self, r):
        name = r["function"]
        if name not in self.functions:
            raise KeyError(f"no function {name!r} registered; this worker has: {', '.join(sorted(self.functions)) or 'none'}")
        fn, prepare = self.functions[name]
        inputs = {k: np.load(v["path"]) for k, v in r["inputs"].items()}
        args = prepare(**inputs) if prepare else inputs
        params = inspect.signature(fn).parameters
        takes_all = any(p.kind == p.VAR_KEYWORD for p in params.values())
        if not takes_all:
            unknown = [p for p in params if p not in args and p != "workload"]
            if unknown:
                raise TypeError(f"function {name} takes {', '.join(unknown)}: no input of this workload (its inputs: {', '.join(args)})")
            args = {k: v for k, v in args.items() if k in params}
        if takes_all or "workload" in params:
            args = dict(args, workload=r.get("workload", {}))
        if self._flush is None:
            self._make_flush(int(r.get("flush_bytes", 64 << 20)))
        if r.get("ready", True) is False:
            # Set up again on new inputs before the checked run, which must be the first call on
            # them: the readying call (first touches of the new buffers, the allocator's) is made
            # on other values, so that no result kept from it can pass for the checked run's.
            other = {k: v * np.float32(0.5) + np.float32(0.25) for k, v in inputs.items()}
            other_args = prepare(**other) if prepare else other
            other_args = {k: v for k, v in other_args.items() if k in args}
            if "workload" in args:
                other_args["workload"] = args["workload"]
            self._timed(fn, other_args)
            del other, other_args
            self.cases[r["id"]] = {"fn": fn, "args": args, "output": r["output"]["path"], "result": None}
            return {"ok": True}
        # One untimed call readies the function (torch.compile compiles, Triton autotunes) within
        # setup's longer time limit, not in a timed run.
        result, _ = self._timed(fn, args)
        _check_evaluated(name, result)
        # A second call on other inputs must give another result: a function that caches its
        # first result, or writes its output only on its first call, answers every call with it.
        first = np.array(_to_numpy(result), copy=True)
        other = {k: v * np.float32(0.5) + np.float32(0.25) for k, v in inputs.items()}
        other_args = prepare(**other) if prepare else other
        other_args = {k: v for k, v in other_args.items() if k in args}
        if "workload" in args:
            other_args["workload"] = args["workload"]
        again, _ = self._timed(fn, other_args)
        _check_evaluated(name, again)
        second = _to_numpy(again)
        if first.shape == np.shape(second) and np.array_equal(first, second, equal_nan=True):
            same = " (the same object)" if again is result else ""
            raise RuntimeError(
                f"function {name} returned the same result{same} for different inputs: a result cached "
                "across calls, or an output written only on the first call, would be timed as the kernel"
            )
        result, _ = self._timed(fn, args)
        self.cases[r["id"]] = {"fn": fn, "args": args, "output": r["output"]["path"], "result": result}
        return {"ok": True}

    def _case(self, r):
        case = self.cases.get(r.get("id"))
        if case is None:
            raise KeyError(f"no case {r.get('id')!r} set up")
        return case

    # ---- timing and caches ----

    def _timed(self, fn, args, cold=False):
        if self.device.startswith("cuda"):
            return self._cuda_timer()(fn, args, cold)
        if cold:
            self._flush_caches()
        start = time.perf_counter()
        out = fn(**args)
        _block(out)
        return out, time.perf_counter() - start

    def _counted(self, case):
        """One run with Valgrind's counting on around the call (counts mode, docs/counts.md):
        on, which empties the simulated caches; the call; a dump of its counts; the flush, whose
        write-backs are the lines the call left dirty; a dump of those; off. What is counted is
        the interpreter's work in the call too: the function's frame, the array it returns."""
        vg = _valgrind()
        if self.device != "cpu":
            raise RuntimeError(f"a counted run counts a CPU process's work; this worker runs on {self.device}")
        if not vg.running():
            raise RuntimeError("a counted run needs Valgrind, and this worker does not run under it")
        vg.request(_CALLGRIND_START)
        try:
            return self._timed(case["fn"], case["args"])
        finally:
            vg.request(_CALLGRIND_DUMP)
            self._flush_caches()
            vg.request(_CALLGRIND_DUMP)
            vg.request(_CALLGRIND_STOP)

    def _cuda_timer(self):
        """The timer of a CUDA run, by opledger's one rule for GPU samples (docs/cuda.md): what
        is timed starts behind the work already on the stream — a cold run's flush (a read) and
        a short hold kernel — with no host synchronisation in between, so Python's dispatch of
        the call never leaves the GPU idle inside the sample; it ends after the whole device is
        synchronised, so work the call started on any other stream is timed (and its output is
        complete before anything reads it)."""
        if self._timer is None:
            try:
                import torch

                # Cycles of the hold: about 0.5 ms at 2 GHz, longer than a Python call's dispatch.
                hold = lambda: torch.cuda._sleep(_HOLD_CYCLES)
                sync = torch.cuda.synchronize
                event = lambda: torch.cuda.Event(enable_timing=True)
                elapsed_ms = lambda a, b: a.elapsed_time(b)
            except ImportError:
                import cupy

                spin = cupy.RawKernel(_HOLD_KERNEL, "opledger_hold")
                hold = lambda: spin((1,), (1,), (cupy.int64(_HOLD_CYCLES),))
                sync = lambda: cupy.cuda.Device().synchronize()
                event = cupy.cuda.Event
                elapsed_ms = cupy.cuda.get_elapsed_time

            def timer(fn, args, cold):
                a, b = event(), event()
                if cold:
                    self._flush()
                hold()
                a.record()
                out = fn(**args)
                sync()
                b.record()
                b.synchronize()
                return out, elapsed_ms(a, b) / 1e3

            self._timer = timer
            # The warm-up: the GPU busy for a while before the first timed run, so that its
            # clocks have ramped from idle.
            for _ in range(100):
                hold()
            sync()
        return self._timer

    def _make_flush(self, nbytes):
        if self.device.startswith("cuda"):
            # Read (a reduction), not written: a memset leaves up to an L2 of dirty lines,
            # written back inside the next timed run.
            try:
                import torch

                l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20)
                buf = torch.zeros(2 * l2, dtype=torch.uint8, device="cuda")
                self._flush = lambda: buf.sum()
            except ImportError:
                import cupy

                l2 = cupy.cuda.Device().attributes.get("L2CacheSize", 64 << 20)
                buf = cupy.zeros(2 * l2, dtype=cupy.uint8)
                self._flush = lambda: buf.sum()
        else:
            # Read (not written): evicts the case's data without dirty lines of its own.
            buf = np.ones(max(nbytes // 4, 1), dtype=np.float32)
            self._flush = lambda: float(buf.sum())

    def _flush_caches(self):
        """The flush of a CPU run (a counted one's included), done when it returns."""
        self._flush()


#: The hold before each CUDA run, in GPU clock cycles (about 0.5 ms at 2 GHz).
_HOLD_CYCLES = 1_000_000
#: The hold's kernel for CuPy (PyTorch has its own, torch.cuda._sleep).
_HOLD_KERNEL = r"""
extern "C" __global__ void opledger_hold(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}
"""


# Callgrind's client requests (valgrind/callgrind.h): the tool's base 'C','T', plus k.
_CALLGRIND_BASE = (ord("C") << 24) | (ord("T") << 16)
_CALLGRIND_DUMP = _CALLGRIND_BASE
_CALLGRIND_START = _CALLGRIND_BASE + 4
_CALLGRIND_STOP = _CALLGRIND_BASE + 5
_RUNNING_ON_VALGRIND = 0x1001


class _Valgrind:
    """Valgrind's client requests from Python: a small machine-code function in an executable
    page, called through ctypes. It is valgrind/valgrind.h's sequence for amd64 (four rotations
    of rdi that leave it as it was, then `xchg rbx, rbx`), which does nothing on a real CPU and
    which Valgrind answers: the request's six words are pointed to by rax, its default is in rdx,
    the answer comes back in rdx. Where no such page can be made (another architecture, a system
    that refuses writable executable memory) every request answers its default."""

    # mov rax, rdi; mov rdx, rsi; rol rdi, 3; rol rdi, 13; rol rdi, 61; rol rdi, 51;
    # xchg rbx, rbx; mov rax, rdx; ret
    _CODE = bytes.fromhex("4889f8" "4889f2" "48c1c703" "48c1c70d" "48c1c73d" "48c1c733" "4887db" "4889d0" "c3")

    def __init__(self):
        self._fn = None
        import platform

        if platform.machine().lower() not in ("x86_64", "amd64"):
            return
        try:
            import ctypes
            import mmap

            self._page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
            self._page.write(self._CODE)
            address = ctypes.addressof(ctypes.c_char.from_buffer(self._page))
            self._fn = ctypes.CFUNCTYPE(ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t)(address)
            self._args = (ctypes.c_size_t * 6)()
            self._ctypes = ctypes
        except (ImportError, OSError, ValueError, AttributeError, TypeError):
            self._fn = None

    def request(self, code, default=0):
        if self._fn is None:
            return default
        self._args[0] = code
        return self._fn(self._ctypes.addressof(self._args), default)

    def running(self):
        return self.request(_RUNNING_ON_VALGRIND) != 0


_valgrind_requests = None


def _valgrind():
    global _valgrind_requests
    if _valgrind_requests is None:
        _valgrind_requests = _Valgrind()
    return _valgrind_requests


def _check_evaluated(name, out):
    """Refuses a result that is not an array yet: a lazy value timed before it was computed."""
    if inspect.isgenerator(out) or inspect.iscoroutine(out) or callable(out):
        raise TypeError(f"function {name} returned {type(out).__name__}, a value not computed yet: return the array itself")
    if callable(getattr(out, "compute", None)) and not isinstance(out, np.ndarray):
        raise TypeError(f"function {name} returned an unevaluated lazy {type(out).__name__} (it has .compute()): compute it inside the function, where it is timed")
    if not hasattr(out, "shape"):
        raise TypeError(f"function {name} returned {type(out).__name__}, not an array")


def _block(out):
    """Waits for lazily computed results (JAX) before the clock stops."""
    ready = getattr(out, "block_until_ready", None)
    if callable(ready):
        ready()


def _to_numpy(out):
    if hasattr(out, "detach"):  # torch
        out = out.detach().cpu().numpy()
    elif hasattr(out, "get") and not isinstance(out, np.ndarray) and hasattr(out, "device"):  # cupy
        out = out.get()
    return np.asarray(out)
