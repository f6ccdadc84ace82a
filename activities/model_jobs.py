"""Model jobs' node activities: resolve a model's source, download it resumably into a staging dir (the
digest computed from the hashes taken while the bytes streamed), check it (file count, pickles, format,
signature) and place it in the managed cache by digest; recompute a digest (`verify`); evict the cache.

The managed cache is the state dir's `models/` (berth.model_paths.ModelCache): on a cluster of several hosts,
a shared filesystem, as HPC centres mount one; a node reports the digests it sees in its heartbeat."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from pathlib import Path

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.download_meter import DownloadTally
from activities.node_context import NodeContext
from berth.api_client import ApiClient
from berth.contracts import ModelProgress, ModelProgressReport
from berth.contracts.model_registry import EvictedDigest, EvictResult
from berth.errors import BerthError
from berth.model_digest import ManifestEntry, compare, digest_of, manifest_of, manifest_text, read_manifest
from berth.model_paths import ModelCache, allowed_model_dirs, evict_plan, place_digest, remove_digest, staged_path
from berth.model_scan import ModelScanError, check_signature, scan
from berth.settings import ClusterSettings
from berth.settings.components import admin_user
from workflows import activity_stubs as stubs
from workflows.activity_stubs import implements
from workflows.model_payloads import (
    CheckedModel,
    CheckInput,
    DownloadedModel,
    DownloadInput,
    EvictInput,
    JobModel,
    ResolvedModel,
    ResolveInput,
    VerifiedModel,
    VerifyInput,
)

PROGRESS_EVERY_S = 1.0


def _fail(message: str, kind: str, final: bool = True) -> ApplicationError:
    return ApplicationError(message, type=kind, non_retryable=final)


def _manifest_beside(staging: Path) -> Path:
    """Where the download leaves the manifest for the check (never inside the model's own directory)."""
    return staging.with_name(staging.name + ".manifest")


class ModelJobActivities:
    def __init__(self, context: NodeContext, api: ApiClient | None, settings: ClusterSettings) -> None:
        self.context = context
        self.api = api  # resolves the HF token and the signing key at the last moment; reports progress
        self.settings = settings
        self.cache = ModelCache(context.state.models)

    # --- helpers ------------------------------------------------------------------------------------
    def _endpoint(self) -> str:
        return self.settings.weights_endpoint()

    async def _secret(self, ref: str, owner: str, kind: str, what: str) -> str:
        if self.api is None:
            raise _fail("this node agent cannot resolve secrets (no API client)", "SecretError")
        try:
            found, value = await self.api.resolve_secret(ref, owner)
        except BerthError as error:
            raise _fail(f"{what} {ref}: {error}", "SecretError") from None
        if kind and found != kind:
            raise _fail(f"{what} {ref} is a '{found}' secret; it must be of type {kind}", "SecretError")
        return value

    async def _hf_token(self, spec: JobModel) -> str | None:
        if not spec.hf_token_secret:
            return None
        value = await self._secret(spec.hf_token_secret, spec.owner, "hf", "HfTokenSecret")
        return str(json.loads(value)["token"])

    async def _signing_key(self) -> bytes | None:
        """The cluster's model signing key: the secret `model_signing_secret` names, as its administrator
        holds it (a `value` secret, or JSON {"key": …}); None when the cluster names none."""
        ref = self.settings.model_signing_secret
        if not ref:
            return None
        value = await self._secret(ref, admin_user(), "", "model_signing_secret")
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = value
        key = parsed.get("key", "") if isinstance(parsed, dict) else value
        return str(key).encode() or None

    def _staged(self, spec: JobModel) -> Path:
        try:
            return staged_path(spec.path or "", allowed_model_dirs(self.settings.model_dirs))
        except (ValueError, BerthError) as error:
            raise _fail(str(error), "ModelSource") from None

    def _resolve_hf(self, spec: JobModel, token: str | None, revision: str) -> object:
        from activities.hub import resolve

        return resolve(self._endpoint(), spec.repo or "", revision, token, list(spec.allow_patterns) or None,
                       list(spec.ignore_patterns) or None)

    async def _resolve(self, spec: JobModel, revision: str) -> object:
        from activities.errors import WeightsError, application_error

        token = await self._hf_token(spec)
        try:
            return await asyncio.to_thread(self._resolve_hf, spec, token, revision)
        except WeightsError as error:
            raise application_error(error) from None

    # --- activities ---------------------------------------------------------------------------------
    @implements(stubs.resolve_model)
    async def resolve_model(self, request: ResolveInput) -> ResolvedModel:
        spec = request.spec
        if spec.source_kind == "path":
            path = await asyncio.to_thread(self._staged, spec)
            entries = await asyncio.to_thread(_listing, path, self.settings.model_max_files)
            return ResolvedModel(commit="path", size_bytes=sum(e[1] for e in entries), files=len(entries),
                                 staged_path=str(path))
        resolved = await self._resolve(spec, spec.revision or "main")
        return ResolvedModel(commit=resolved.commit, size_bytes=resolved.size_bytes,  # type: ignore[attr-defined]
                             files=len(resolved.files))  # type: ignore[attr-defined]

    @implements(stubs.download_model)
    async def download_model(self, request: DownloadInput) -> DownloadedModel:
        spec, resolved = request.spec, request.resolved
        await self._report_retry(request)
        if spec.source_kind == "path":
            return await self._hash_staged(request)
        if spec.digest and spec.commit == resolved.commit and self.cache.digest_dir(spec.digest).is_dir():
            # Materialized before, bytes still in the cache: nothing to fetch (the check re-scans them).
            return DownloadedModel(node_id=self.context.node_id, staging=str(self.cache.digest_dir(spec.digest)),
                                   digest=spec.digest, size_bytes=resolved.size_bytes, files=resolved.files,
                                   bytes_transferred=0, verified=True, cached=True)
        from activities.errors import WeightsError, application_error
        from activities.model_fetch import fetch

        listing = await self._resolve(spec, resolved.commit)  # the pinned commit: the same files
        staging = self.cache.partial_dir(spec.repo or "", resolved.commit, _variant(spec))
        reporter = _Progress(self.api, spec.model_id, request.job_id)
        try:
            with self.context.downloads.download() as reporter.tally:
                result = await fetch(listing, self._endpoint(), spec.repo or "", staging,  # type: ignore[arg-type]
                                     await self._hf_token(spec), reporter)
        except WeightsError as error:
            raise application_error(error) from None
        finally:
            await reporter.flush()
        entries = [ManifestEntry(path=path, size=size, sha256=sha) for path, (size, sha) in result.files.items()]
        digest = digest_of(entries)
        await asyncio.to_thread(_write_text, _manifest_beside(staging), manifest_text(entries))
        return DownloadedModel(node_id=self.context.node_id, staging=str(staging), digest=digest,
                               size_bytes=sum(e.size for e in entries), files=len(entries),
                               bytes_transferred=result.bytes_transferred, verified=result.verified,
                               unverified_files=result.unverified_files[:5])

    async def _hash_staged(self, request: DownloadInput) -> DownloadedModel:
        """A pre-staged directory: hashed where it is (never copied into the cache, never evicted)."""
        path = await asyncio.to_thread(self._staged, request.spec)
        entries = await asyncio.to_thread(manifest_of, path, self.settings.model_max_files)
        digest = digest_of(entries)
        await asyncio.to_thread(_write_text, self.cache.manifest_path(digest), manifest_text(entries))
        return DownloadedModel(node_id=self.context.node_id, staging=str(path), digest=digest,
                               size_bytes=sum(e.size for e in entries), files=len(entries), bytes_transferred=0,
                               # Nothing published a checksum of a directory someone put on disk.
                               verified=False, unverified_files=[e.path for e in entries[:5]])

    @implements(stubs.check_model)
    async def check_model(self, request: CheckInput) -> CheckedModel:
        spec, downloaded = request.spec, request.downloaded
        staging = Path(downloaded.staging)
        if downloaded.cached or spec.source_kind == "path":
            manifest_file = self.cache.manifest_path(downloaded.digest)
        else:
            manifest_file = _manifest_beside(staging)
        entries = read_manifest(await asyncio.to_thread(manifest_file.read_text))
        try:
            report = scan(entries, self.settings.model_max_files, spec.format.value)
            check_signature(downloaded.digest, spec.signature, await self._signing_key())
        except (ModelScanError, ValueError) as error:
            raise _fail(f"model {spec.name}: {error}", "ModelScan") from None
        if spec.source_kind == "path":
            model_dir = staging
        elif downloaded.cached:
            model_dir = self.cache.digest_dir(downloaded.digest)
        else:
            model_dir = await asyncio.to_thread(place_digest, staging, self.cache, downloaded.digest, entries)
            await asyncio.to_thread(manifest_file.unlink, True)
        return CheckedModel(model_dir=str(model_dir), digest=downloaded.digest, files=report.files,
                            safetensors_files=report.safetensors_files, size_bytes=report.bytes)

    @implements(stubs.verify_model)
    async def verify_model(self, request: VerifyInput) -> VerifiedModel:
        spec = request.spec
        if not spec.digest:
            raise _fail(f"model {spec.name} was never materialized: berth model materialize {spec.name}",
                        "ModelSource")
        manifest_file = self.cache.manifest_path(spec.digest)
        root = self._staged(spec) if spec.source_kind == "path" else self.cache.digest_dir(spec.digest)
        if not manifest_file.is_file() or not root.is_dir():
            raise _fail(f"model {spec.name}'s bytes (digest {spec.digest[:12]}…) are not in the cache (evicted?): "
                        f"berth model materialize {spec.name}", "ModelSource")
        expected = read_manifest(await asyncio.to_thread(manifest_file.read_text))
        beat = asyncio.ensure_future(_heartbeat_forever())
        try:
            actual = await asyncio.to_thread(manifest_of, root, self.settings.model_max_files)
        finally:
            beat.cancel()
        problems = compare(expected, actual)
        digest = digest_of(actual)
        ok = not problems and digest == spec.digest
        if not problems and not ok:
            problems = [f"the manifest gives digest {digest[:12]}…, the registry {spec.digest[:12]}…"]
        return VerifiedModel(ok=ok, digest=spec.digest, problems=problems)

    @implements(stubs.evict_model_cache)
    async def evict_model_cache(self, request: EvictInput) -> EvictResult:
        cached = await asyncio.to_thread(self.cache.cached_digests)
        before = sum(size for size, _mtime in cached.values())
        # Oldest first by the later of the bytes' arrival and the registry's last use.
        aged = {d: (size, max(mtime, request.last_used.get(d, 0.0))) for d, (size, mtime) in cached.items()}
        evict, kept = evict_plan(aged, set(request.referenced), request.budget_bytes)
        evicted = []
        for digest in evict:
            await asyncio.to_thread(remove_digest, self.cache, digest)
            evicted.append(EvictedDigest(digest=digest, bytes=cached[digest][0], models=request.names.get(digest, [])))
        after = before - sum(item.bytes for item in evicted)
        return EvictResult(budget_bytes=request.budget_bytes, before_bytes=before, after_bytes=after,
                           evicted=evicted, kept_referenced=kept)

    async def _report_retry(self, request: DownloadInput) -> None:
        attempt = activity.info().attempt
        if attempt > 1 and self.api is not None:
            from berth.contracts import ModelState, ModelStateReport

            report = ModelStateReport(job_id=request.job_id, state=ModelState.DOWNLOADING, retries=attempt - 1)
            try:
                await self.api.report_model_state(request.spec.model_id, report)
            except BerthError:
                pass  # the count is a courtesy; the download matters


class _Progress:
    """The fetch's progress callback: a heartbeat each time (the workflow notices a dead node by its
    silence) and a report to the registry at most once a second, one in flight at a time."""

    def __init__(self, api: ApiClient | None, model_id: str, job_id: str) -> None:
        self.api, self.model_id, self.job_id = api, model_id, job_id
        self.last = 0.0
        self.sending: asyncio.Task[None] | None = None
        self.latest: ModelProgress | None = None
        self.tally: DownloadTally | None = None  # the node's download metrics, while the fetch runs

    def __call__(self, progress: ModelProgress) -> None:
        if self.tally is not None:
            self.tally.progress(progress.bytes_done, progress.rate_bps)
        activity.heartbeat(progress.model_dump())
        self.latest = progress
        now = time.monotonic()
        if self.api is None or now - self.last < PROGRESS_EVERY_S or (self.sending and not self.sending.done()):
            return
        self.last = now
        self.sending = asyncio.ensure_future(self._send(progress))

    async def _send(self, progress: ModelProgress) -> None:
        assert self.api is not None
        try:
            await self.api.report_model_progress(self.model_id, ModelProgressReport(job_id=self.job_id,
                                                                                     progress=progress))
        except BerthError:
            pass  # progress is shown, not kept: the next report carries it

    async def flush(self) -> None:
        if self.sending is not None:
            await asyncio.gather(self.sending, return_exceptions=True)
        if self.latest is not None and self.api is not None:
            await self._send(self.latest)


async def _heartbeat_forever() -> None:
    while True:
        activity.heartbeat()
        await asyncio.sleep(5)


def _listing(root: Path, max_files: int) -> list[tuple[str, int]]:
    """(relative path, size) of a staged directory's files, refusing more than `max_files`."""
    found: list[tuple[str, int]] = []
    for base, _dirs, files in os.walk(root):
        for name in files:
            found.append((os.path.relpath(os.path.join(base, name), root), os.path.getsize(os.path.join(base, name))))
            if len(found) > max_files:
                raise _fail(f"{root} holds more than {max_files} files (model_max_files)", "ModelScan")
    return found


def _write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _variant(spec: JobModel) -> str:
    """Which files of a commit a model is: records with other patterns stage apart (a staged directory
    becomes the digest's, so it may hold only the files its manifest lists)."""
    if not spec.allow_patterns and not spec.ignore_patterns:
        return ""
    chosen = json.dumps([sorted(spec.allow_patterns), sorted(spec.ignore_patterns)])
    return hashlib.sha256(chosen.encode()).hexdigest()[:16]
