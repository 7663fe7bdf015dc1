"""Running a plan on Ray: one worker per GPU (or N CPU workers), locally or on a cluster.

Each key is one Ray task. A task tunes in its own worker process with its own
temporary ``FLYAUTOTUNE_CACHE_DIR`` (workers share nothing on disk) and returns the
winner as a pack entry; the driver merges each entry into its store as it arrives
(so a Ctrl-C of the driver keeps every finished key) and writes one pack at the end.
Ray retries a task whose worker process died, so a crash loses only the key in flight.
A worker's search progress reaches the driver's progress through a small actor (:class:`ProgressBox`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Iterator, Optional
from urllib.parse import urlsplit

from .._markers import hookimpl
from ..devices import use_triton_interpreter
from ..progress import first_line

import attrs

from .plan import Plan, PlanKey, plugin_manager_for
from .runner import KeyResult, PlanInterrupted, PlanResult, look_up_key, tune_key

log = logging.getLogger("flyautotune.scale")

INSTALL_HINT = "pip install 'flyautotune[ray]'"
#: What a ``ray://`` address needs beside Ray (``flyautotune[ray]`` has it).
CLIENT_INSTALL_HINT = "pip install 'ray[client]'"
ADDRESS_ENV = "RAY_ADDRESS"
#: How often Ray re-runs a key whose worker process died.
RETRIES = 3
#: How often the driver looks up from waiting for its keys, to show the keys in flight.
TICK_S = 1.0
#: Default ports: a cluster's GCS (``ray start --head``), and the Ray Client server (``ray://``).
GCS_PORT, CLIENT_PORT = 6379, 10001
#: One connection attempt of ``ray.init(address=...)`` where something other than a Ray head answers (Ray 2.60:
#: two 5 s RPC connects, a 30 s wait for the cluster ID, 1 s between attempts); Ray makes 20 by default (14 min).
RAY_ATTEMPT_S = 41.0
#: Ray's own count of those attempts (read by ``ray.init``; an operator's own setting is kept).
RAY_ATTEMPTS_ENV = "RAY_gcs_server_port_wait_time_s"
ADDRESS_FORMS = (f"HOST:PORT of a head's GCS (port {GCS_PORT} by default), ray://HOST:PORT of a Ray Client server "
                 f"(port {CLIENT_PORT} by default), or auto")


class RayConnectError(ConnectionError):
    """No Ray cluster answered at ``address`` within the time allowed; the message says what was tried."""

    def __init__(self, address: str, message: str, malformed: bool = False) -> None:
        super().__init__(message)
        self.address = address
        self.malformed = malformed  # not an address at all (the message lists the accepted forms)


def ray_installed() -> bool:
    """True when ``import ray`` works."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def local_gpus() -> int:
    """GPUs torch sees on this machine (0 without torch)."""
    from ..devices import device_count

    return device_count()


def _host_port(address: str) -> Optional[tuple]:
    """``(host, port)`` the address connects to first, or None where Ray finds the cluster itself (``auto``,
    ``local``, another scheme). Raises RayConnectError for an address that is not one."""
    if address in ("auto", "local"):
        return None
    scheme, _, rest = address.rpartition("://")
    if scheme.lower() in ("http", "https"):
        raise RayConnectError(address, f"{address!r} is an HTTP address (a Ray dashboard's, or its Jobs API's), "
                                       f"not a Ray cluster's; accepted: {ADDRESS_FORMS}", True)
    if scheme not in ("", "ray"):
        return None  # a scheme a Ray plugin handles: Ray itself says what is wrong with it
    try:
        parts = urlsplit("//" + rest)
        host, port, extra = parts.hostname, parts.port, parts.path or parts.query or parts.fragment
    except ValueError:  # a port that is not a number, a broken [IPv6] literal
        host = port = extra = None
    if not host or extra or port == 0:
        raise RayConnectError(address, f"{address!r} is not a Ray address; accepted: {ADDRESS_FORMS}", True)
    return host, port if port is not None else (CLIENT_PORT if scheme else GCS_PORT)


def _join(host: str, port: int) -> str:
    """``host:port``, an IPv6 host in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _wait_for_port(host: str, port: int, deadline: float) -> str:
    """``""`` once something accepts a connection at ``host:port``; why not, once ``deadline`` has passed (a name
    that does not resolve fails at once). A head that is starting gets until the deadline."""
    why = "no answer"
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=max(min(left, 5.0), 0.1)):
                return ""
        except socket.gaierror as exc:
            return f"the host name {host!r} does not resolve ({exc.strerror or exc})"
        except OSError as exc:
            why = exc.strerror or str(exc) or type(exc).__name__
        if deadline - time.monotonic() <= 0:
            return why
        time.sleep(min(0.5, max(deadline - time.monotonic(), 0.0)))


#: What a gRPC client sends first (the HTTP/2 preface and an empty SETTINGS frame), as Ray does to a head; a gRPC
#: server (a head's GCS, a Ray Client server) answers with a SETTINGS frame of its own at once.
HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
#: Ray's own check that a head's GCS answers at an address (``ray health-check``, a hidden command of Ray's CLI).
HEALTH_CHECK = ("-m", "ray.scripts.scripts", "health-check", "--skip-version-check", "--address")
NO_ANSWER = "no answer in time"


def _what_answers(host: str, port: int, deadline: float) -> tuple:
    """``("", False)`` where an HTTP/2 (gRPC) server answers at ``host:port``, as a Ray head's GCS or a Ray Client
    server does; otherwise ``(what answered instead, whether the deadline passed)``, once it said something else,
    closed the connection, or stayed silent until ``deadline``."""
    where = _join(host, port)
    got, closed = b"", False
    try:
        with socket.create_connection((host, port), timeout=max(deadline - time.monotonic(), 0.1)) as conn:
            conn.sendall(HTTP2_HELLO)
            while len(got) < 9 and deadline - time.monotonic() > 0:
                conn.settimeout(max(deadline - time.monotonic(), 0.01))
                chunk = conn.recv(4096)
                closed = not chunk
                if closed:
                    break
                got += chunk
    except socket.timeout:
        pass
    except OSError as exc:  # reset, refused since: the port closes on us
        closed = not got
        if not closed:
            log.debug("reading %s: %s", where, exc)
    if len(got) >= 9 and got[3] == 4:  # an HTTP/2 frame header: length (3 bytes), type 4 = SETTINGS
        return "", False
    if not got:
        if closed:
            return f"something at {where} accepts connections and closes them, as a Ray head does not", False
        return f"something accepts connections at {where} but sends nothing back (a Ray head answers at once)", True
    line = (got.splitlines() or [got])[0][:80].decode("ascii", "replace")
    what = "an HTTP server" if line.startswith(("HTTP/", "<")) else "something"  # a status line, or HTML
    return f"{what} answers at {where}, not a Ray head: it sent {line!r}", False


def _health_check(ray: Any, address: str, deadline: float) -> str:
    """``""`` once Ray's own check (``ray health-check``) finds a Ray head's GCS at ``address``; why not, once it
    failed or ``deadline`` passed. It runs in a child process, ended at the deadline: in this process, Ray's
    client waits about 40 s for a GCS that does not answer, and cannot be stopped sooner."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(getattr(ray, "__file__", "") or ""))
    if root:  # the child finds the Ray this process imported (last: a folder of it must not shadow the stdlib)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), root) if p)
    child = subprocess.Popen([sys.executable, *HEALTH_CHECK, address], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        _, err = child.communicate(timeout=max(deadline - time.monotonic(), 0.1))
    except subprocess.TimeoutExpired:
        return NO_ANSWER
    finally:
        if child.poll() is None:  # the deadline, or a Ctrl-C: the check ends with this call
            child.kill()
            child.communicate()
    if child.returncode == 0:
        return ""
    lines = [x.strip() for x in err.decode("utf-8", "replace").splitlines() if x.strip()]
    return lines[-1][:400] if lines else f"exit status {child.returncode}"


def _client_installed() -> bool:
    """Whether Ray's client (``ray[client]``: gRPC for Python) is installed, as a ``ray://`` address needs."""
    import importlib.util

    return importlib.util.find_spec("grpc") is not None


def _client_ping(host: str, port: int, deadline: float, tls: bool = False) -> tuple:
    """``("", False)`` where a Ray Client server (``ray://``) answers the ping Ray's client sends first, or where
    this Ray cannot send it as its client would; otherwise ``(why not, whether the deadline passed)``. Ray's
    client retries a failed ping for about 30 s, and waits for an answer without end."""
    try:
        import grpc
        from ray.core.generated import ray_client_pb2, ray_client_pb2_grpc
    except ImportError:
        return "", False
    where = _join(host, port)
    try:  # as Ray's client opens it: TLS (RAY_USE_TLS) and token authentication included
        from ray._private.grpc_utils import init_grpc_channel
    except ImportError:  # an older Ray: a plain channel, where no TLS is asked for
        init_grpc_channel = None if tls else grpc.insecure_channel
    try:  # Ray's client options: no HTTP proxy (http_proxy=... in the environment is not followed), its limits
        from ray.util.client.common import GRPC_OPTIONS as options
    except ImportError:
        options = [("grpc.enable_http_proxy", 0)]
    try:
        channel = init_grpc_channel(where, options=options) if init_grpc_channel is not None else None
    except Exception as exc:  # noqa: BLE001 - a TLS setting Ray's client will name as it opens its own
        log.debug("cannot open a channel to %s: %s", where, exc)
        channel = None
    if channel is None:
        return "", False
    ping = ray_client_pb2.ClusterInfoRequest(type=ray_client_pb2.ClusterInfoType.PING)
    try:
        ray_client_pb2_grpc.RayletDriverStub(channel).ClusterInfo(ping, timeout=max(deadline - time.monotonic(), 0.1))
    except grpc.RpcError as exc:
        code = exc.code()
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return f"an HTTP/2 (gRPC) server answers at {where}, but not to the ping of Ray's client", True
        if code == grpc.StatusCode.UNIMPLEMENTED:  # a head's GCS, most often: ray:// with its port
            return (f"a gRPC server answers at {where}, but not a Ray Client server (it does not know the Ray "
                    f"Client's calls, as a head's GCS does not: ray:// takes the Ray Client server's port, "
                    f"{CLIENT_PORT} by default)"), False
        return f"the ping of Ray's client failed at {where} ({code.name}: {first_line(exc.details())})", False
    finally:
        channel.close()
    return "", False


def _node_here(ray: Any) -> bool:
    """Whether a Ray node runs on this machine, as ``ray.init`` needs to connect through a head's GCS (it looks
    for one for a minute otherwise); True where this Ray cannot say."""
    find = getattr(getattr(getattr(ray, "_private", None), "services", None), "find_node_ids", None)
    if find is None:
        return True
    try:
        return bool(find())
    except Exception as exc:  # noqa: BLE001 - Ray's own search says more, later
        log.debug("cannot look for a Ray node on this machine: %s", exc)
        return True


@contextlib.contextmanager
def _ray_attempts(seconds: float) -> Iterator[None]:
    """Inside: ``ray.init`` makes as many connection attempts as fit in ``seconds`` (at least one)."""
    if RAY_ATTEMPTS_ENV in os.environ:  # the operator's own budget
        yield
        return
    os.environ[RAY_ATTEMPTS_ENV] = str(max(1, int(seconds // RAY_ATTEMPT_S)))
    try:
        yield
    finally:
        os.environ.pop(RAY_ATTEMPTS_ENV, None)


def connect(ray: Any, address: str, timeout_s: float, **kwargs: Any) -> None:
    """``ray.init(address=address)``, once a Ray head answers there: where none does (nothing, a closed port,
    another service), the call fails within ``timeout_s``. ``ray.init`` alone retries for about 14 minutes, waits
    about 40 s for each attempt where another service answers, a minute for a head's GCS from a machine that is
    not a node of its cluster, and without end for a ``ray://`` server that does not answer.

    ``timeout_s`` bounds the checks before ``ray.init``, not ``ray.init`` itself. For a head's GCS, ``ray.init``
    makes the connection attempts of Ray's that fit in the time left (at least one). For a ``ray://`` address,
    it waits, with no limit of Ray's, for the Ray Client server that answered the ping to start this client's
    session: a server that answers the ping and then hangs holds the call until Ctrl-C.

    Before ``ray.init``: something must accept a connection at the address (a head that is starting gets until
    the deadline) and answer as a gRPC server does. For a head's GCS (``HOST:PORT``, ``auto``), Ray's own ``ray
    health-check`` (run in a child process that ends at the deadline) must pass, and a Ray node must run on this
    machine; for a Ray Client server (``ray://``), it must answer the ping Ray's client sends first. An address
    without a port gets the default port, as probed.

    :raises RayConnectError: naming the address, what answered there where anything did, and (for the wrong
        kind of address) which kind to give.
    """
    deadline = time.monotonic() + timeout_s
    target = _host_port(address)
    cannot = f"cannot connect to the Ray cluster at {address!r}"
    within = f"{cannot} within {timeout_s:g} s: "
    client = target is not None and address.startswith("ray://")
    if client and not _client_installed():
        raise RayConnectError(address, f"{cannot}: a ray:// address needs the Ray Client, which is not installed "
                                       f"here: {CLIENT_INSTALL_HINT}")
    tls = os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true")
    where = _join(*target) if target is not None else ""
    ray_address = address
    if target is not None:
        why = _wait_for_port(*target, deadline)
        if why:
            raise RayConnectError(address, f"{within}nothing answers at {where} ({why})")
        if time.monotonic() >= deadline:  # the checks below would blame the address for time they never had
            raise RayConnectError(address, f"{within}{where} began to accept connections only as the time ran "
                                           f"out: none was left to ask whether a Ray head answers there")
        if not tls:  # Ray's TLS wants a TLS handshake first: there, only Ray's own checks below ask
            why, late = _what_answers(*target, deadline)
            if why:
                raise RayConnectError(address, (within if late else f"{cannot}: ") + why)
        if urlsplit("//" + address.rpartition("://")[2]).port is None:  # Ray takes no address without a port
            ray_address = ("ray://" if client else "") + where
    if client:
        why, late = _client_ping(*target, deadline, tls)
        if why:
            raise RayConnectError(address, (within if late else f"{cannot}: ") + why)
    elif address == "auto" or target is not None:  # a head's GCS: ask as Ray does
        why = _health_check(ray, ray_address, deadline)
        answers = f"an HTTP/2 (gRPC) server answers at {where}, but " if target is not None else ""
        if why == NO_ANSWER:
            raise RayConnectError(address, f"{within}{answers}no Ray head answered Ray's own check (ray "
                                           f"health-check) in time")
        if why:
            raise RayConnectError(address, f"{cannot}: {answers}Ray's own check (ray health-check) failed: {why}")
        if not _node_here(ray):
            gcs, client_at = (where, _join(target[0], CLIENT_PORT)) if target is not None else ("HOST:PORT", "HOST")
            raise RayConnectError(address, (
                f"{cannot}: {f'a Ray head answers at {where}, but ' if target is not None else ''}no Ray node runs "
                f"on this machine, and a head's address connects only a machine of its cluster (after `ray start "
                f"--address {gcs}`); from another machine, connect through the Ray Client: ray://{client_at}"))
    try:
        with _ray_attempts(deadline - time.monotonic()):
            ray.init(address=ray_address, **kwargs)
    except Exception as exc:  # Ray's ConnectionError, ...
        answers = f"{where} answers, but " if target is not None else ""
        raise RayConnectError(address, f"{cannot}: {answers}Ray could not connect ({type(exc).__name__}: "
                                       f"{first_line(exc)})") from None


def _tune_in_worker(key: dict, force: bool, plugins: tuple, known: Optional[str], use_gpu: bool,
                    skip: Optional[str] = None, box: Any = None, index: int = 0) -> dict:
    """Runs inside a Ray worker: tune one key against a private, temporary store.

    ``known`` is pack text of the driver's winners for this key's tuner, so a key
    stored earlier is not searched again (unless ``force``). With ``skip`` (why the key
    may not search: the budget is spent), the key's stored winner is only looked up.
    With ``box`` (a :class:`ProgressBox` actor), the search's progress events go there as
    ``(index, event)``, all of them before the result returns; a run of the key that Ray retried says so first.
    """
    from ..devices import default_device
    from ..store import TuningStore

    pkey = PlanKey.from_dict(key)
    folder = tempfile.mkdtemp(prefix="flyautotune-worker-")
    store = None
    managers: list = []
    plug = sender = None
    try:
        # Ray gives a GPU task its GPU as the only visible one.
        device = default_device() if use_gpu else "cpu"
        if device == "cpu":
            use_triton_interpreter()
        pm = plugin_manager_for(tuple(plugins))
        store = TuningStore(folder)
        plug = _WorkerStore(store)
        adopter = pm.get_adopter(pkey.adopter)
        # The worker's private store, through the store hook of every manager the tune consults.
        managers = list({id(m): m for m in (pm, adopter.tuner.pm)}.values())
        for m in managers:
            m.register(plug)
        if box is not None:  # the tuner's events, as the serial runner's progress receives them
            sender = _SendProgress(box, index)
            adopter.tuner.pm.register(sender)
        if known:
            path = os.path.join(folder, "known.json")
            with open(path, "w", encoding="utf-8") as f:
                f.write(known)
            store.import_pack(path)
        result = look_up_key(adopter, pkey, device, skip) if skip else tune_key(adopter, pkey, device, force)
        return attrs.evolve(result, worker=f"{socket.gethostname()}:{os.getpid()}").to_dict()
    finally:
        if sender is not None:
            adopter.tuner.pm.unregister(sender)
            sender.flush()
        for m in managers:
            m.unregister(plug)
        if store is not None:
            store.close()
        shutil.rmtree(folder, ignore_errors=True)


#: The events of a search a driver's progress shows (``flyautotune_tuning_event``), and the fields it reads.
RELAYED = ("search_start", "candidate", "retime", "search_end")
RELAYED_FIELDS = ("event", "candidates", "index", "total", "config", "ms", "error", "reused", "round", "most",
                  "finalists", "duration_s")
#: How long a worker waits, at the end of a key, for its progress events to reach the driver's box.
FLUSH_S = 10.0
#: How long the driver waits for the box to start; past it, the plan runs without the workers' progress.
START_S = 30.0


class ProgressBox:
    """A Ray actor's body: holds the workers' search progress events until the driver takes them.

    Each run of a key begins with :meth:`begin`, which numbers it: Ray runs a key again where its worker died,
    and then the driver is told (a ``retry`` event) and the earlier run's late events are dropped, so a key
    shows one search at a time."""

    def __init__(self) -> None:
        self.events: list = []
        self.attempts: dict = {}  # key index -> its latest run's number (1, then 2 for Ray's first retry)

    def begin(self, index: int) -> int:
        """A worker starts key ``index``: the number of this run of the key (1 the first time)."""
        attempt = self.attempts.get(index, 0) + 1
        self.attempts[index] = attempt
        if attempt > 1:
            self.events.append((index, {"event": "retry", "attempt": attempt}))
        return attempt

    def put(self, index: int, event: dict, attempt: int = 1) -> None:
        if attempt == self.attempts.get(index, attempt):  # not a dead run's event that came in late
            self.events.append((index, event))

    def take(self) -> list:
        events, self.events = self.events, []
        return events


class _SendProgress:
    """In a Ray worker: sends one key's search progress events to the driver's :class:`ProgressBox`, without
    waiting for them, except at the start (this run's number) and at the end (:meth:`flush`)."""

    def __init__(self, box: Any, index: int) -> None:
        import ray

        self.box, self.index, self.last = box, index, None
        try:  # before any event: the box drops the events of a run of this key that Ray gave up on
            self.attempt = ray.get(box.begin.remote(index), timeout=FLUSH_S)
        except Exception as exc:  # noqa: BLE001 - progress must never fail a key: this run sends none
            log.debug("cannot send progress to the driver: %s", exc)
            self.box = None

    @hookimpl
    def flyautotune_tuning_event(self, event: dict) -> None:
        if self.box is None or event.get("event") not in RELAYED:
            return
        slim = {k: event[k] for k in RELAYED_FIELDS if k in event}
        if not isinstance(slim.get("candidates", 0), int):  # search_end's candidate rows: not shown
            del slim["candidates"]
        try:
            self.last = self.box.put.remote(self.index, slim, self.attempt)
        except Exception as exc:  # noqa: BLE001 - progress must never fail a key
            log.debug("cannot send progress to the driver: %s", exc)

    def flush(self) -> None:
        """Wait (at most ``FLUSH_S``) until the events sent are in the box, so the driver has them before the
        key's result."""
        if self.last is None:
            return
        import ray

        try:
            ray.wait([self.last], timeout=FLUSH_S)
        except Exception as exc:  # noqa: BLE001
            log.debug("cannot send progress to the driver: %s", exc)


class _Relay:
    """In the driver: the workers' search progress, taken from a :class:`ProgressBox` actor and handed to
    ``on_event(key, event)``. A box that stops answering turns the relay off (with a warning), never the plan."""

    def __init__(self, ray: Any, keys: tuple, on_event: Any) -> None:
        self.ray, self.keys, self.on_event = ray, keys, on_event
        # No CPU: the box is scheduled where every CPU is busy with keys.
        self.box = ray.remote(num_cpus=0)(ProgressBox).remote()
        self.asked: Any = None
        self.on = True
        try:  # up before any key starts: a worker waits for its events to be in the box before its result
            ray.get(self.box.take.remote(), timeout=START_S)
        except BaseException:
            self.close()
            raise

    def relay(self, wait_s: float = 0.0) -> None:
        """Hand on the events that came back since the last call; with ``wait_s``, also every event the box
        holds now (a key's result comes after its worker filled the box). A box that does not answer within
        ``wait_s`` is given up, so that it never holds up the plan again."""
        if not self.on:
            return
        deadline = time.monotonic() + wait_s
        late = TimeoutError(f"the progress actor did not answer in {wait_s:g} s")
        try:
            if self.asked is not None and not self._collect(deadline):  # an earlier ask, not back yet
                if wait_s:
                    raise late
                return
            self.asked = self.box.take.remote()  # collected here with wait_s, else by the next call
            if wait_s and not self._collect(deadline):
                raise late
        except Exception as exc:  # noqa: BLE001 - the plan goes on without the workers' progress
            log.warning("the Ray workers' search progress is not shown from now on (%s: %s)", type(exc).__name__,
                        first_line(exc))
            self.on = False

    def _collect(self, deadline: float) -> bool:
        try:
            events = self.ray.get(self.asked, timeout=max(deadline - time.monotonic(), 0.0))
        except self.ray.exceptions.GetTimeoutError:  # not back yet: the next call collects it
            return False
        self.asked = None
        for index, event in events:
            self.on_event(self.keys[index], event)
        return True

    def close(self) -> None:
        """End the box (a caller's own Ray instance outlives the plan)."""
        try:
            self.ray.kill(self.box)
        except Exception:  # noqa: BLE001 - gone already
            pass


def _relay(ray: Any, plan: Plan, progress: Any) -> Optional[_Relay]:
    """A relay of the workers' search progress to ``progress.key_event``, or None where ``progress`` has none or
    the box cannot start."""
    on_event = getattr(progress, "key_event", None)
    if on_event is None:
        return None
    try:
        return _Relay(ray, plan.keys, on_event)
    except Exception as exc:  # noqa: BLE001 - progress must never stop a plan
        log.warning("the Ray workers' search progress is not shown (%s: %s)", type(exc).__name__, first_line(exc))
        return None


class _WorkerStore:
    """A Ray worker's private store, handed to the tuners through ``flyautotune_store``."""

    def __init__(self, store: Any) -> None:
        self.store = store

    @hookimpl(tryfirst=True)
    def flyautotune_store(self) -> Any:
        return self.store


def _known_winners(plan: Plan, pm: Any) -> dict:
    """Pack text of the driver store's winners, per adopter of the plan."""
    from ..store import dump_pack

    store = pm.hook.flyautotune_store()
    out = {}
    for name in {k.adopter for k in plan.keys}:
        try:
            entries = store.entries(pm.get_adopter(name).tuner.name)
        except Exception as exc:  # an unreadable store means: search everything
            log.warning("cannot read the store's winners for %s (%s); every key is searched", name, exc)
            entries = []
        out[name] = dump_pack(entries) if entries else None
    return out


def run_ray(plan: Plan, *, address: Optional[str] = None, workers: Optional[int] = None,
            force: Optional[bool] = None, progress: Any = None, retries: int = RETRIES,
            connect_timeout_s: Optional[float] = None) -> PlanResult:
    """Tune every key of ``plan`` on Ray and merge the winners into this process's store.

    :param address: a running cluster (``ray://...`` or ``host:port``); default
        ``$RAY_ADDRESS``; neither: a local Ray instance with one worker per visible
        GPU, or ``workers`` CPU workers on a machine without a GPU. An already
        initialized Ray (``ray.init`` called by the caller) is used as it is.
    :param workers: CPU workers of a local instance (default ``options.workers`` or 2).
    :param force: overrides ``options.force``.
    :param progress: called with each :class:`KeyResult` as it finishes; where it has ``started(key)``,
        ``tick()`` and ``key_event(key, event)`` (as :class:`PlanProgress` has), those are called as a key goes
        to a worker, while waiting, and with each tuning event of a key's search on its worker (relayed through
        a small actor, at most a tick late, and all of a key's events before its result). Where Ray runs a key
        again (its worker died), ``key_event`` gets ``{"event": "retry", "attempt": n}`` before the new run's
        events, and none of the earlier run's after it.
    :param retries: how often a key whose worker died is run again.
    :param connect_timeout_s: how long a named cluster gets to answer (default ``options.connect_timeout_s``).
    :returns: a :class:`PlanResult` in plan order; the winners are in the store, each merged as it arrived.
    :raises ImportError: Ray is not installed (the message says how to install it).
    :raises RayConnectError: no cluster answered at ``address`` in time (the message names it).
    :raises PlanInterrupted: on Ctrl-C, with the keys that finished (their winners are in the store); the keys
        in flight are cancelled.
    """
    try:
        import ray
    except ImportError:
        raise ImportError(f"the Ray engine needs Ray: {INSTALL_HINT}") from None
    from .runner import merge_into_store

    opts = plan.options
    force = opts.force if force is None else force
    pm = plugin_manager_for(opts.plugins)
    address = address or os.environ.get(ADDRESS_ENV) or None
    started = False
    if not ray.is_initialized():
        kw: dict = {"include_dashboard": False, "logging_level": logging.WARNING}
        if address:
            connect(ray, address, connect_timeout_s or opts.connect_timeout_s, **kw)
        else:
            gpus = local_gpus()
            ray.init(num_gpus=gpus, **({} if gpus else {"num_cpus": workers or opts.workers or 2}), **kw)
        started = True
    t0 = time.perf_counter()
    results: dict = {}
    pending: dict = {}
    merged: set = set()
    engine = "ray"
    relay = None
    try:
        resources = ray.cluster_resources()
        use_gpu = resources.get("GPU", 0) >= 1
        slots = int(resources.get("GPU", 0) if use_gpu else resources.get("CPU", 1)) or 1
        engine = f"ray, {slots} {'GPU' if use_gpu else 'CPU'} worker(s)"
        task = ray.remote(max_retries=retries, **({"num_gpus": 1} if use_gpu else {"num_cpus": 1}))(_tune_in_worker)
        known = {} if force else _known_winners(plan, pm)
        started_key, tick = getattr(progress, "started", None), getattr(progress, "tick", None)
        relay = _relay(ray, plan, progress)
        box = relay.box if relay is not None else None
        t0 = time.perf_counter()
        queue = list(enumerate(plan.keys))
        while queue or pending:
            # Keep one key per worker in flight, so the budget can stop new keys.
            while queue and len(pending) < slots:
                i, key = queue.pop(0)
                spent = time.perf_counter() - t0
                skip = None
                if (results or pending) and opts.budget_s is not None and spent > opts.budget_s:
                    # The budget stops searches; a stored winner costs a worker's lookup and still ships.
                    skip = f"budget of {opts.budget_s:g} s spent"
                    if force or known.get(key.adopter) is None:  # nothing stored to look up
                        results[i] = KeyResult(key, "skipped", error=skip)
                        _report(progress, results[i])
                        continue
                ref = task.remote(key.to_dict(), force, opts.plugins, known.get(key.adopter), use_gpu, skip, box, i)
                pending[ref] = (i, key)
                if started_key is not None:
                    started_key(key)
            if not pending:
                continue
            done, _ = ray.wait(list(pending), num_returns=1, timeout=TICK_S)
            if relay is not None:  # the workers' search progress; all of a key's before its result
                relay.relay(FLUSH_S if done else 0.0)
            if not done and tick is not None:
                tick()  # a key can take minutes: show the keys in flight
            for ref in done:
                i, key = pending.pop(ref)
                try:
                    results[i] = KeyResult.from_dict(ray.get(ref))
                except Exception as exc:  # retries exhausted, or the task could not run at all
                    results[i] = KeyResult(key, "error", error=f"{type(exc).__name__}: {first_line(exc)}")
                # Into the driver's store now: a Ctrl-C later must not lose what the workers finished.
                merge_into_store(PlanResult([results[i]]))
                merged.add(i)
                _report(progress, results[i])
    except KeyboardInterrupt:
        for ref in pending:  # a caller's own Ray instance outlives this call: stop the keys in flight
            try:
                ray.cancel(ref)
            except Exception:  # noqa: BLE001 - already finished or gone; shutting down stops the rest
                pass
        merge_into_store(PlanResult([r for i, r in results.items() if i not in merged]))  # one that came in last
        done_keys = PlanResult([results[i] for i in sorted(results)], time.perf_counter() - t0, engine)
        raise PlanInterrupted(done_keys, len(plan.keys)) from None
    finally:
        if relay is not None:
            relay.close()
        if started:
            ray.shutdown()
    return PlanResult([results[i] for i in range(len(plan.keys))], time.perf_counter() - t0, engine)


def _report(progress: Any, result: KeyResult) -> None:
    if progress is not None:
        progress(result)
