"""trioperator: Kubernetes operators on trio, with Kopf's API (``import trioperator as kopf``).

This is the curated public surface; everything under ``trioperator._*`` is internal.
"""

from trioperator import conditions as conditions
from trioperator import lifecycles as lifecycles
from trioperator import on as on

# trioperator's own: the API client for operator code (Kopf has none) and its errors.
from trioperator._client.apiclient.asyncapi import AsyncAPI as AsyncAPI
from trioperator._client.apiclient.asyncapi import AsyncPager as AsyncPager
from trioperator._client.apiclient.asyncapi import AsyncResourceAPI as AsyncResourceAPI
from trioperator._client.apiclient.asyncapi import AsyncWatch as AsyncWatch
from trioperator._client.apiclient.calls import ObjectList as ObjectList
from trioperator._client.apiclient.conflicts import APIFieldConflictError as APIFieldConflictError
from trioperator._client.apiclient.conflicts import FieldConflict as FieldConflict
from trioperator._client.apiclient.settings import ClientSettings as APIClientSettings
from trioperator._client.apiclient.syncapi import SyncAPI as SyncAPI
from trioperator._client.apiclient.syncapi import SyncResourceAPI as SyncResourceAPI
from trioperator._client.apiclient.syncapi import SyncWatch as SyncWatch
from trioperator._client.config import login_with_kubeconfig as login_with_kubeconfig
from trioperator._client.config import login_with_service_account as login_with_service_account
from trioperator._client.credentials import AiohttpSession as AiohttpSession
from trioperator._client.credentials import ConnectionInfo as ConnectionInfo
from trioperator._client.credentials import LoginError as LoginError
from trioperator._client.credentials import Vault as Vault
from trioperator._client.errors import APIBadRequestError as APIBadRequestError
from trioperator._client.errors import APIClientError as APIClientError
from trioperator._client.errors import APIConflictError as APIConflictError
from trioperator._client.errors import APIConnectionError as APIConnectionError
from trioperator._client.errors import APIError as APIError
from trioperator._client.errors import APIForbiddenError as APIForbiddenError
from trioperator._client.errors import APIGoneError as APIGoneError
from trioperator._client.errors import APINotFoundError as APINotFoundError
from trioperator._client.errors import APIProtocolError as APIProtocolError
from trioperator._client.errors import APIRedirectError as APIRedirectError
from trioperator._client.errors import APIResponseTooLargeError as APIResponseTooLargeError
from trioperator._client.errors import APIServerError as APIServerError
from trioperator._client.errors import APITimeoutError as APITimeoutError
from trioperator._client.errors import APITooManyRequestsError as APITooManyRequestsError
from trioperator._client.errors import APIUnauthorizedError as APIUnauthorizedError
from trioperator._client.errors import APIUnprocessableEntityError as APIUnprocessableEntityError
from trioperator._client.piggybacking import login_via_async_client as login_via_async_client
from trioperator._client.piggybacking import login_via_client as login_via_client
from trioperator._client.piggybacking import login_via_pykube as login_via_pykube
from trioperator._client.resources import Resource as Resource
from trioperator._client.settings import WatchSelector as WatchSelector
from trioperator._engine.bodies import Annotations as Annotations
from trioperator._engine.bodies import Body as Body
from trioperator._engine.bodies import Labels as Labels
from trioperator._engine.bodies import Meta as Meta
from trioperator._engine.bodies import RawBody as RawBody
from trioperator._engine.bodies import RawEvent as RawEvent
from trioperator._engine.bodies import RawEventType as RawEventType
from trioperator._engine.bodies import Spec as Spec
from trioperator._engine.bodies import Status as Status
from trioperator._engine.diffbase import AnnotationsDiffBaseStorage as AnnotationsDiffBaseStorage
from trioperator._engine.diffbase import BodyEssence as BodyEssence
from trioperator._engine.diffbase import DiffBaseStorage as DiffBaseStorage
from trioperator._engine.diffbase import MultiDiffBaseStorage as MultiDiffBaseStorage
from trioperator._engine.diffbase import StatusDiffBaseStorage as StatusDiffBaseStorage
from trioperator._engine.diffs import Diff as Diff
from trioperator._engine.diffs import DiffItem as DiffItem
from trioperator._engine.diffs import DiffOperation as DiffOperation
from trioperator._engine.errors import ActivityError as ActivityError
from trioperator._engine.errors import AdmissionError as AdmissionError
from trioperator._engine.errors import ErrorsMode as ErrorsMode
from trioperator._engine.errors import HandlerRetriesError as HandlerRetriesError
from trioperator._engine.errors import HandlerTimeoutError as HandlerTimeoutError
from trioperator._engine.errors import PermanentError as PermanentError
from trioperator._engine.errors import TemporaryError as TemporaryError
from trioperator._engine.filters import ABSENT as ABSENT
from trioperator._engine.filters import PRESENT as PRESENT
from trioperator._engine.filters import FieldPath as FieldPath
from trioperator._engine.filters import FieldSpec as FieldSpec
from trioperator._engine.filters import all_ as all_
from trioperator._engine.filters import any_ as any_
from trioperator._engine.filters import none_ as none_
from trioperator._engine.filters import not_ as not_
from trioperator._engine.ids import HandlerId as HandlerId
from trioperator._engine.indexing import Index as Index
from trioperator._engine.indexing import Store as Store
from trioperator._engine.lifecycles import get_default_lifecycle as get_default_lifecycle
from trioperator._engine.lifecycles import set_default_lifecycle as set_default_lifecycle
from trioperator._engine.memos import Memo as Memo
from trioperator._engine.patches import Patch as Patch
from trioperator._engine.patches import PatchFn as PatchFn
from trioperator._engine.progress import AnnotationsProgressStorage as AnnotationsProgressStorage
from trioperator._engine.progress import MultiProgressStorage as MultiProgressStorage
from trioperator._engine.progress import ProgressRecord as ProgressRecord
from trioperator._engine.progress import ProgressStorage as ProgressStorage
from trioperator._engine.progress import SmartProgressStorage as SmartProgressStorage
from trioperator._engine.progress import StatusProgressStorage as StatusProgressStorage
from trioperator._engine.reasons import Reason as Reason
from trioperator._engine.reconciling import ObjectKey as ObjectKey
from trioperator._engine.reconciling import Requeue as Requeue
from trioperator._engine.reconciling import generation_changed as generation_changed
from trioperator._engine.references import ObjectReference as ObjectReference
from trioperator._engine.references import OwnerReference as OwnerReference
from trioperator._engine.references import build_object_reference as build_object_reference
from trioperator._engine.references import build_owner_reference as build_owner_reference
from trioperator._engine.registry import OperatorRegistry as OperatorRegistry
from trioperator._engine.registry import get_default_registry as get_default_registry
from trioperator._engine.registry import set_default_registry as set_default_registry
from trioperator._engine.selectors import EVERYTHING as EVERYTHING
from trioperator._engine.settings import OperatorSettings as OperatorSettings
from trioperator._engine.stoppers import DaemonStopped as DaemonStopped
from trioperator._engine.stoppers import DaemonStoppingReason as DaemonStoppingReason
from trioperator._engine.stoppers import SyncDaemonStopperChecker as SyncDaemonStopperChecker
from trioperator._engine.webhooks import Headers as Headers
from trioperator._engine.webhooks import Operation as Operation
from trioperator._engine.webhooks import SSLPeer as SSLPeer
from trioperator._engine.webhooks import UserInfo as UserInfo
from trioperator._engine.webhooks import WebhookClientConfig as WebhookClientConfig
from trioperator._engine.webhooks import WebhookClientConfigService as WebhookClientConfigService
from trioperator._engine.webhooks import WebhookFn as WebhookFn
from trioperator._engine.webhooks import WebhookServerProtocol as WebhookServerProtocol
from trioperator._kits.errors import MissingDependencyError as MissingDependencyError
from trioperator._kits.hierarchies import adjust_namespace as adjust_namespace
from trioperator._kits.hierarchies import adopt as adopt
from trioperator._kits.hierarchies import append_owner_reference as append_owner_reference
from trioperator._kits.hierarchies import harmonize_naming as harmonize_naming
from trioperator._kits.hierarchies import label as label
from trioperator._kits.hierarchies import remove_owner_reference as remove_owner_reference
from trioperator._kits.webhooks import WebhookAutoServer as WebhookAutoServer
from trioperator._kits.webhooks import WebhookAutoTunnel as WebhookAutoTunnel
from trioperator._kits.webhooks import WebhookDockerDesktopServer as WebhookDockerDesktopServer
from trioperator._kits.webhooks import WebhookK3dServer as WebhookK3dServer
from trioperator._kits.webhooks import WebhookMinikubeServer as WebhookMinikubeServer
from trioperator._kits.webhooks import WebhookNgrokTunnel as WebhookNgrokTunnel
from trioperator._kits.webhooks import WebhookServer as WebhookServer
from trioperator._kits.webhooks import WebhookServiceServer as WebhookServiceServer
from trioperator._runtime.handling.apiclients import api_client as api_client
from trioperator._runtime.handling.apiclients import connect_api as connect_api
from trioperator._runtime.handling.apiclients import connect_sync_api as connect_sync_api
from trioperator._runtime.handling.apiclients import sync_api_client as sync_api_client
from trioperator._runtime.handling.execution import execute as execute
from trioperator._runtime.handling.loggers import LocalObjectLogger as LocalObjectLogger
from trioperator._runtime.handling.loggers import Logger as Logger
from trioperator._runtime.handling.loggers import ObjectLogger as ObjectLogger
from trioperator._runtime.handling.posting import event as event
from trioperator._runtime.handling.posting import exception as exception
from trioperator._runtime.handling.posting import info as info
from trioperator._runtime.handling.posting import warn as warn
from trioperator._runtime.objects.daemon_flags import (
    AsyncDaemonStopperChecker as AsyncDaemonStopperChecker,
)
from trioperator._runtime.program.embedding import operator as operator
from trioperator._runtime.program.embedding import run as run
from trioperator._runtime.program.embedding import run_tasks as run_tasks
from trioperator._runtime.program.embedding import spawn_tasks as spawn_tasks
from trioperator._runtime.program.logsetup import LogFormat as LogFormat
from trioperator._runtime.program.logsetup import configure as configure
from trioperator._runtime.program.operator import Operator as Operator
from trioperator._version import __version__ as __version__
from trioperator.on import daemon as daemon
from trioperator.on import index as index
from trioperator.on import register as register
from trioperator.on import subhandler as subhandler
from trioperator.on import timer as timer

__all__ = [
    "ABSENT",
    "APIBadRequestError",
    "APIClientError",
    "APIClientSettings",
    "APIConflictError",
    "APIConnectionError",
    "APIError",
    "APIFieldConflictError",
    "APIForbiddenError",
    "APIGoneError",
    "APINotFoundError",
    "APIProtocolError",
    "APIRedirectError",
    "APIResponseTooLargeError",
    "APIServerError",
    "APITimeoutError",
    "APITooManyRequestsError",
    "APIUnauthorizedError",
    "APIUnprocessableEntityError",
    "ActivityError",
    "AdmissionError",
    "AiohttpSession",
    "Annotations",
    "AnnotationsDiffBaseStorage",
    "AnnotationsProgressStorage",
    "AsyncAPI",
    "AsyncDaemonStopperChecker",
    "AsyncPager",
    "AsyncResourceAPI",
    "AsyncWatch",
    "Body",
    "BodyEssence",
    "ConnectionInfo",
    "DaemonStopped",
    "DaemonStoppingReason",
    "Diff",
    "DiffBaseStorage",
    "DiffItem",
    "DiffOperation",
    "EVERYTHING",
    "ErrorsMode",
    "FieldConflict",
    "FieldPath",
    "FieldSpec",
    "HandlerId",
    "HandlerRetriesError",
    "HandlerTimeoutError",
    "Headers",
    "Index",
    "Labels",
    "LocalObjectLogger",
    "LogFormat",
    "Logger",
    "LoginError",
    "Memo",
    "Meta",
    "MissingDependencyError",
    "MultiDiffBaseStorage",
    "MultiProgressStorage",
    "ObjectKey",
    "ObjectList",
    "ObjectLogger",
    "ObjectReference",
    "Operation",
    "Operator",
    "OperatorRegistry",
    "OperatorSettings",
    "OwnerReference",
    "PRESENT",
    "Patch",
    "PatchFn",
    "PermanentError",
    "ProgressRecord",
    "ProgressStorage",
    "RawBody",
    "RawEvent",
    "RawEventType",
    "Reason",
    "Requeue",
    "Resource",
    "SSLPeer",
    "SmartProgressStorage",
    "Spec",
    "Status",
    "StatusDiffBaseStorage",
    "StatusProgressStorage",
    "Store",
    "SyncAPI",
    "SyncDaemonStopperChecker",
    "SyncResourceAPI",
    "SyncWatch",
    "TemporaryError",
    "UserInfo",
    "Vault",
    "WatchSelector",
    "WebhookAutoServer",
    "WebhookAutoTunnel",
    "WebhookClientConfig",
    "WebhookClientConfigService",
    "WebhookDockerDesktopServer",
    "WebhookFn",
    "WebhookK3dServer",
    "WebhookMinikubeServer",
    "WebhookNgrokTunnel",
    "WebhookServer",
    "WebhookServerProtocol",
    "WebhookServiceServer",
    "__version__",
    "adjust_namespace",
    "adopt",
    "all_",
    "any_",
    "api_client",
    "append_owner_reference",
    "build_object_reference",
    "build_owner_reference",
    "configure",
    "connect_api",
    "connect_sync_api",
    "daemon",
    "event",
    "exception",
    "execute",
    "generation_changed",
    "get_default_lifecycle",
    "get_default_registry",
    "harmonize_naming",
    "index",
    "info",
    "label",
    "lifecycles",
    "login_via_async_client",
    "login_via_client",
    "login_via_pykube",
    "login_with_kubeconfig",
    "login_with_service_account",
    "none_",
    "not_",
    "on",
    "operator",
    "register",
    "remove_owner_reference",
    "run",
    "run_tasks",
    "set_default_lifecycle",
    "set_default_registry",
    "spawn_tasks",
    "subhandler",
    "sync_api_client",
    "timer",
    "warn",
]
