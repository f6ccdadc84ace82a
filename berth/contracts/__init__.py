"""The contracts the control-plane API and its callers share (the ground floor: no Berth import): every
route's request and response models, split by resource, re-exported here so `from berth.contracts import X`
names any of them (each module imported when first needed: see `__getattr__`). The server declares them as
`response_model`; `berth.api_client.ApiClient` returns them."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # at run time, __getattr__ below imports a contract's module when the contract is first named
    from berth.contracts.audit import (
        MAX_AUDIT_BATCH,
        MAX_AUDIT_LIST,
        AuditAppended,
        AuditBatch,
        AuditPhase,
        AuditRecord,
        AuditRow,
        AuditVerdict,
    )
    from berth.contracts.backup import (
        BACKUP_FORMAT,
        BACKUP_VERSION,
        BackupApiKey,
        BackupApiToken,
        BackupDocument,
        BackupEndpoint,
        BackupEndpointToken,
        BackupGroup,
        BackupKeys,
        BackupMembership,
        BackupModel,
        BackupModelUse,
        BackupPart,
        BackupPolicy,
        BackupRestored,
        BackupRevision,
        BackupSecret,
        BackupTables,
        BackupTokenCutoff,
        BackupUser,
        BackupWorkflow,
        RestoredWorkflow,
    )
    from berth.contracts.base import (
        Number,
        OpenResponse,
        Payload,
        Refusal,
        Response,
        wire,
    )
    from berth.contracts.capacity import (
        Capacity,
        EntryFit,
        GpuFigures,
        GpuModelCapacity,
        NodeCapacity,
        NodeCounts,
    )
    from berth.contracts.catalog import (
        EntryDetail,
        EntrySummary,
        MemoryRow,
        ParameterView,
    )
    from berth.contracts.endpoint_history import (
        EndpointHistory,
        HistoryPoint,
    )
    from berth.contracts.endpoint_policy import EndpointPolicy
    from berth.contracts.endpoints import (
        CopyView,
        EndpointAnnotations,
        EndpointClientFacts,
        EndpointToken,
        EndpointTokenRecord,
        EndpointTokenRequest,
        EndpointTokenRevoked,
        EndpointView,
        ServedModel,
        WakeRequest,
        WakeResult,
    )
    from berth.contracts.events import (
        MAX_EVENTS_PAGE,
        EventKind,
        EventPage,
        EventRecord,
    )
    from berth.contracts.explain import (
        CopyEnd,
        CopyFailure,
        CopyPlacement,
        CopyRouting,
        FailureExplanation,
        NodeVerdict,
        PlacementExplanation,
        RankLog,
        RoutingExplanation,
        ScoreTerms,
    )
    from berth.contracts.identity import (
        GroupRequest,
        GroupView,
        MemberRequest,
        UserRequest,
        UserView,
    )
    from berth.contracts.internal import (
        CopyScrape,
        Health,
        Jwks,
        LoadReport,
        OwnerToken,
        OwnerTokenRequest,
        ReplicaKeysList,
        ReplicaKeysToken,
        RequestCounters,
        RouteCopy,
        RouteEntry,
        RoutesTable,
        ScrapeReport,
        ServiceCopies,
        ServiceCopy,
        ServiceToken,
        TokenLapse,
    )
    from berth.contracts.keys import (
        IssuedKey,
        KeyCreateRequest,
        KeyLimits,
        KeyRecord,
        KeyRequests,
        KeyReservation,
        KeyReserveRequest,
        KeyRotateRequest,
        KeyVerdict,
        KeyVerifyRequest,
    )
    from berth.contracts.limits import (
        SCOPES,
        LimitPolicy,
        ScopeLimits,
        endpoint_limits,
        limit_policy_from,
    )
    from berth.contracts.litellm_keys import (
        VIRTUAL_KEY_PREFIX,
        LiteLLMDeletedKeys,
        LiteLLMIssuedKey,
        LiteLLMKeyCall,
        LiteLLMKeyInfo,
        LiteLLMKeyInfoAnswer,
    )
    from berth.contracts.model_registry import (
        DIGEST_PATTERN,
        MODEL_NAME_PATTERN,
        EvictedDigest,
        EvictRequest,
        EvictResult,
        JobStarted,
        ModelCreate,
        ModelFormat,
        ModelJobRecord,
        ModelJobSpec,
        ModelProgress,
        ModelProgressReport,
        ModelRecord,
        ModelRelease,
        ModelReleased,
        ModelScope,
        ModelState,
        ModelStateReport,
        ModelUse,
        ModelUseAnswer,
    )
    from berth.contracts.nodes import (
        GpuReport,
        GpuView,
        NodeInventory,
        NodeState,
        NodeView,
    )
    from berth.contracts.placement import (
        MAX_HOLDINGS,
        CopyReadiness,
        CopyRecord,
        EndpointFront,
        FenceRequest,
        FrontPort,
        FrontPortRequest,
        NodeHolding,
        Placement,
        RankPlacement,
        ReserveRequest,
        ReserveResult,
        SitePlacement,
    )
    from berth.contracts.policies import (
        DEPLOY_HOURS_PATTERN,
        POLICY_KINDS,
        Policy,
        PolicyKind,
        PolicyRemoved,
        PolicyRules,
        PolicyUsage,
        ScaleAllowance,
        ScaleAllowanceRequest,
    )
    from berth.contracts.pool_facts import (
        PoolFacts,
    )
    from berth.contracts.rollouts import (
        CopyOutcomes,
        RevisionHealth,
        Rollout,
        RolloutAction,
        RolloutCommand,
        RolloutKind,
        RolloutPhase,
        RolloutStrategy,
        ScalingExplanation,
        ScalingSignal,
        ServedRevision,
        TrafficSplit,
        WorkflowDrainRequest,
        WorkflowRevision,
        WorkflowRevisionDefinition,
        WorkflowUpdated,
        WorkflowUpdateRequest,
    )
    from berth.contracts.secrets import (
        ResolvedSecret,
        ResolveRequest,
        SecretCreated,
        SecretRequest,
        SecretView,
    )
    from berth.contracts.slurm import SlurmNodes, SlurmNodeView
    from berth.contracts.tokens import (
        MintedToken,
    )
    from berth.contracts.usage import (
        BudgetStatus,
        UsageBudget,
        UsageBudgets,
        UsageBy,
        UsageFigures,
        UsagePeriod,
        UsageReport,
        UsageRow,
    )
    from berth.contracts.workflows import (
        CopyInfo,
        CopyStatus,
        DownloadProgress,
        Event,
        Phase,
        PoolStatus,
        WeightsResult,
        WorkflowDefinitionView,
        WorkflowDescription,
        WorkflowEndpoint,
        WorkflowLogs,
        WorkflowScaled,
        WorkflowScaleRequest,
        WorkflowStarted,
        WorkflowStopped,
        WorkflowSummary,
    )


if not TYPE_CHECKING:  # hidden from mypy, which reads the imports above: a typo stays an error
    def _homes() -> dict[str, str]:
        """Each contract's module, read from the imports above: the one list of the package's names."""
        import ast
        from pathlib import Path

        tree = ast.parse(Path(__file__).read_text())
        return {alias.asname or alias.name: node.module for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(f"{__name__}.")
                for alias in node.names}

    def __getattr__(name: str) -> object:
        """A name on first use (PEP 562): importing the package imports none of its modules, and a name imports
        only its own module (the CLI's `workflow list` pays for `berth.contracts.workflows` alone)."""
        import importlib
        import pkgutil

        homes = globals().get("_HOMES") or globals().setdefault("_HOMES", _homes())
        if name == "__all__":
            return sorted(homes)
        if name in {info.name for info in pkgutil.iter_modules(__path__)}:
            return importlib.import_module(f"{__name__}.{name}")
        if name not in homes:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(homes[name]), name)
        globals()[name] = value
        return value
