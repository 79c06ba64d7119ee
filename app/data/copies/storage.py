"""Where a prepared copy lives, a local folder or a URL (through fsspec): reads, whole-or-nothing writes, retries with
backoff, and one paragraph naming the URL for what no retry mends. `Store.at` is the one way in."""

from __future__ import annotations

import copy
import errno
import logging
import os
from pathlib import Path

import fsspec
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from app.data.copies.retries import count_retry
from app.errors import DataError
from app.io import atomic_write, is_url

TRIES = 5  # a transient error is tried again this many times in all, with doubling waits
FIRST_WAIT = 0.2  # seconds before the second try
DRIVERS = {"s3": "s3fs (pip install 'app[s3]')", "gs": "gcsfs (pip install 'app[gcs]')",
           "gcs": "gcsfs (pip install 'app[gcs]')", "http": "aiohttp", "https": "aiohttp"}
# Errors no retry mends: the object or bucket is not there, access is refused, a wrong argument.
FINAL = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, ValueError, TypeError,
         ImportError)
# botocore's own retries beneath ours: off, so a dead endpoint fails after our TRIES and waits
# (seconds) and not botocore's four retries for each (a minute); its connect timeout bounds a try.
# Where storage_options.config_kwargs (or AWS_MAX_ATTEMPTS, AWS_RETRY_MODE) set them, theirs win.
S3_CONFIG = {"retries": {"total_max_attempts": 1, "mode": "standard"}, "connect_timeout": 5}
# Errors only a local file gives: the disk is full or read-only, the file too large for the process.
LOCAL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG)
AGAIN = "then run the same command again (a resumed run or prepare goes on from where it stopped)"
log = logging.getLogger(__name__)


class LocalWriteError(OSError):
    """A local file a download writes that the OS refused (errno and strerror kept, the file named)."""


class Store:
    """A folder of named files: a local folder, or the objects under a URL."""

    @staticmethod
    def at(location: str, storage_options: dict | None = None) -> Store:
        if is_url(location):
            return RemoteStore(str(location), dict(storage_options or {}))
        return LocalStore(Path(str(location)).expanduser().absolute())

    local: Path | None = None  # the folder, for a local store


class LocalStore(Store):
    def __init__(self, root: Path):
        self.local = self.root = root

    def __str__(self) -> str:
        return str(self.root)

    def path_of(self, name: str) -> str:
        return str(self.root / name)

    def read_bytes(self, name: str) -> bytes:
        return (self.root / name).read_bytes()

    def read_range(self, name: str, start: int, length: int) -> bytes:
        with open(self.root / name, "rb") as f:
            f.seek(start)
            return f.read(length)

    def exists(self, name: str) -> bool:
        return (self.root / name).exists()

    def size(self, name: str) -> int:
        return (self.root / name).stat().st_size

    def write_bytes(self, name: str, data: bytes) -> None:
        (self.root / name).parent.mkdir(parents=True, exist_ok=True)  # a name may be in a subfolder
        with atomic_write(self.root / name, "wb") as f:
            f.write(data)

    def put_file_and_delete_it(self, local: Path, name: str) -> None:
        """Move a finished local file into the store under `name` (a rename: whole or absent)."""
        self.root.mkdir(parents=True, exist_ok=True)
        os.replace(local, self.root / name)

    def delete(self, name: str) -> None:
        (self.root / name).unlink(missing_ok=True)

    def names(self) -> list[str] | None:
        """The names directly under the folder ([] where it is absent or empty); None where it is a file."""
        if self.root.is_file():
            return None
        return sorted(path.name for path in self.root.iterdir()) if self.root.is_dir() else []


class RemoteStore(Store):
    """The objects under `url`: a PUT makes an object whole or absent, so a write is atomic without a rename."""

    def __init__(self, url: str, storage_options: dict):
        self.url, self.storage_options = url.rstrip("/"), storage_options
        self._fs = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_fs": None}  # each process opens its own filesystem

    def __str__(self) -> str:
        return self.url

    @property
    def fs(self):
        if self._fs is None:
            try:
                self._fs, _ = fsspec.core.url_to_fs(self.url, **with_driver_defaults(self.url, self.storage_options))
            except ImportError as error:
                raise storage_error(self.url, error) from None
        return self._fs

    def path_of(self, name: str) -> str:
        return f"{self.url}/{name}"

    def read_bytes(self, name: str) -> bytes:
        return self._retrying(self.path_of(name), lambda path: self.fs.cat_file(path))

    def read_range(self, name: str, start: int, length: int) -> bytes:
        # Keywords: s3fs's cat_file takes a version_id before start and end.
        return self._retrying(self.path_of(name), lambda path: self.fs.cat_file(path, start=start, end=start + length))

    def exists(self, name: str) -> bool:
        return self._retrying(self.path_of(name), lambda path: self.fs.exists(path))

    def size(self, name: str) -> int:
        return int(self._retrying(self.path_of(name), lambda path: self.fs.size(path)))

    def download_to(self, name: str, local: Path) -> None:
        """The object `name` streamed into the file `local`, never whole in memory; LocalWriteError if it cannot be."""
        def get_file(path: str) -> None:
            try:
                self.fs.get_file(path, str(local))
            except OSError as error:
                if error.errno in LOCAL_ERRNOS or error.filename == str(local):  # never a store's error
                    raise LocalWriteError(error.errno, error.strerror, str(local)) from error
                raise
        self._retrying(self.path_of(name), get_file)

    def write_bytes(self, name: str, data: bytes) -> None:
        self._retrying(self.path_of(name), lambda path: self.fs.pipe_file(path, data))

    def put_file_and_delete_it(self, local: Path, name: str) -> None:
        self._retrying(self.path_of(name), lambda path: self.fs.put_file(str(local), path))
        Path(local).unlink(missing_ok=True)

    def delete(self, name: str) -> None:
        path = self.path_of(name)
        if self._retrying(path, lambda p: self.fs.exists(p)):
            self._retrying(path, lambda p: self.fs.rm_file(p))

    def names(self) -> list[str] | None:
        """The names directly under the URL ([]: none; None: it is an object); a DataError for a missing bucket."""
        def listed(path: str) -> list[dict]:
            try:
                return self.fs.ls(path, detail=True)
            except FileNotFoundError:
                if self.fs.exists(self.fs._strip_protocol(path).split("/")[0]):  # the bucket: there, the folder not
                    return []
                raise
        entries = self._retrying(self.url, listed)
        if [entry["type"] for entry in entries] == ["file"] and \
                entries[0]["name"].rstrip("/") == self.fs._strip_protocol(self.url).rstrip("/"):
            return None
        return sorted(entry["name"].rstrip("/").rsplit("/", 1)[-1] for entry in entries)

    def _retrying(self, path: str, call):
        retrying = Retrying(retry=retry_if_exception(_transient), stop=stop_after_attempt(TRIES),
                            wait=wait_exponential(multiplier=FIRST_WAIT), before_sleep=_count_and_log(path),
                            reraise=True)
        try:
            return retrying(call, path)
        except (DataError, LocalWriteError):
            raise
        except FINAL as error:
            raise storage_error(path, error) from None
        except Exception as error:  # noqa: BLE001 - drivers raise their own kinds for a dropped connection
            raise storage_error(path, error, attempts=retrying.statistics["attempt_number"]) from None


def _transient(error: BaseException) -> bool:
    """What another try may mend: not our own errors, not FINAL's, not refused credentials."""
    return not isinstance(error, (DataError, LocalWriteError, *FINAL)) and not _is_credentials(error)


def _count_and_log(path: str):
    """tenacity's hook before each wait: the thread's count of retries (its telemetry) and a warning."""
    def before_sleep(state: RetryCallState) -> None:
        count_retry()
        error = state.outcome.exception()
        log.warning("%s: %s: %s; trying again in %.1f s (try %d of %d)", path, type(error).__name__, error,
                    state.next_action.sleep, state.attempt_number + 1, TRIES)
    return before_sleep


def with_driver_defaults(url: str, options: dict) -> dict:
    """`options` with S3_CONFIG's botocore settings added where the user set none (s3:// only)."""
    if url.split("://", 1)[0].lower() not in ("s3", "s3a"):
        return options
    defaults = copy.deepcopy(S3_CONFIG)  # botocore may amend the dicts it is given
    if "AWS_MAX_ATTEMPTS" in os.environ or "AWS_RETRY_MODE" in os.environ:
        del defaults["retries"]
    return {**options, "config_kwargs": {**defaults, **(options.get("config_kwargs") or {})}}


def _is_credentials(error: Exception) -> bool:
    """botocore's NoCredentialsError and kin, by name (botocore is not imported here), and an HTTP 401 or 403."""
    return ("Credential" in type(error).__name__ or "credential" in str(error).lower()
            or getattr(error, "status", None) in (401, 403))


def storage_error(url: str, error: Exception, attempts: int = 1) -> DataError:
    """One paragraph for a storage failure, naming the URL and what mends it."""
    scheme = url.split("://", 1)[0].lower()
    detail = f"{type(error).__name__}: {error}"
    if isinstance(error, ImportError):
        return DataError(f"{url} cannot be opened: reading {scheme}:// needs {DRIVERS.get(scheme, 'its fsspec driver')}"
                         f" ({detail}).")
    if isinstance(error, FileNotFoundError):
        return DataError(f"{url} does not exist ({detail}): check the bucket (prepare writes into one that exists) "
                         "and the path (a prepared copy's folder holds manifest.json), and the endpoint "
                         "(AWS_ENDPOINT_URL or storage_options.endpoint_url).")
    if isinstance(error, PermissionError) or _is_credentials(error):
        return DataError(f"{url} cannot be read with the credentials given ({detail}): set them in the environment "
                         "(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE; for gs://, "
                         "GOOGLE_APPLICATION_CREDENTIALS) or in storage_options (redacted wherever saved).")
    tried = f" after {attempts} tries" if attempts > 1 else ""
    return DataError(f"{url} could not be reached{tried} ({detail}): check the endpoint and the network, {AGAIN}.")
