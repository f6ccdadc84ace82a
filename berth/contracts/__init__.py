"""The contracts the control-plane API and its callers share (the ground floor: no Berth import): every
route's request and response models, split by resource, re-exported here so `from berth.contracts import X`
names any of them. The server declares them as `response_model`; `berth.api_client.ApiClient` returns them."""

from __future__ import annotations

from berth.contracts.base import (
    Number,
    OpenResponse,
    Payload,
    Response,
    wire,
)
from berth.contracts.catalog import (
    EntryDetail,
    EntrySummary,
    MemoryRow,
    ParameterView,
)
from berth.contracts.endpoints import (
    EndpointAnnotations,
    EndpointClientFacts,
    EndpointToken,
    EndpointView,
    ReplicaView,
    WakeResult,
)
from berth.contracts.identity import (
    GroupView,
    UserView,
)
from berth.contracts.internal import (
    Health,
    Jwks,
    OwnerToken,
    ReplicaKeysList,
    ReplicaKeysToken,
    RouteEntry,
    RouteReplica,
    RoutesTable,
    ServiceReplica,
    ServiceReplicas,
    ServiceToken,
)
from berth.contracts.nodes import (
    GpuView,
    NodeState,
    NodeView,
)
from berth.contracts.placement import (
    MAX_HOLDINGS,
    EndpointService,
    FenceRequest,
    NodeHolding,
    Placement,
    RankPlacement,
    ReplicaReadiness,
    ReplicaRecord,
    ReserveRequest,
    ReserveResult,
    ServicePort,
    ServicePortRequest,
)
from berth.contracts.secrets import (
    ResolvedSecret,
    SecretCreated,
    SecretView,
)
from berth.contracts.tokens import (
    MintedToken,
)
from berth.contracts.workflows import (
    CopyState,
    DownloadProgress,
    WeightsView,
    WorkflowDefinitionView,
    WorkflowDescription,
    WorkflowEndpoint,
    WorkflowEvent,
    WorkflowLogs,
    WorkflowScaled,
    WorkflowStarted,
    WorkflowStopped,
    WorkflowSummary,
)

__all__ = [
    "CopyState",
    "DownloadProgress",
    "EndpointAnnotations",
    "EndpointClientFacts",
    "EndpointService",
    "EndpointToken",
    "EndpointView",
    "EntryDetail",
    "EntrySummary",
    "FenceRequest",
    "GpuView",
    "GroupView",
    "Health",
    "Jwks",
    "MAX_HOLDINGS",
    "MemoryRow",
    "MintedToken",
    "NodeHolding",
    "NodeState",
    "NodeView",
    "Number",
    "OpenResponse",
    "OwnerToken",
    "ParameterView",
    "Payload",
    "Placement",
    "RankPlacement",
    "ReplicaKeysList",
    "ReplicaKeysToken",
    "ReplicaReadiness",
    "ReplicaRecord",
    "ReplicaView",
    "ReserveRequest",
    "ReserveResult",
    "ResolvedSecret",
    "Response",
    "RouteEntry",
    "RouteReplica",
    "RoutesTable",
    "SecretCreated",
    "SecretView",
    "ServicePort",
    "ServicePortRequest",
    "ServiceReplica",
    "ServiceReplicas",
    "ServiceToken",
    "UserView",
    "WakeResult",
    "WeightsView",
    "WorkflowDefinitionView",
    "WorkflowDescription",
    "WorkflowEndpoint",
    "WorkflowEvent",
    "WorkflowLogs",
    "WorkflowScaled",
    "WorkflowStarted",
    "WorkflowStopped",
    "WorkflowSummary",
    "wire",
]
