"""The protocol's value types, independent of any wire: tasks and their parts, the
A2A view of a task, who is calling, and the one error tree with its one table.
"""

from typing import TYPE_CHECKING

from internal.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from internal.protocol.a2a.model._a2a import (
        DEFAULT_PAGE_SIZE as DEFAULT_PAGE_SIZE,
    )
    from internal.protocol.a2a.model._a2a import (
        JSONRPC_PATH as JSONRPC_PATH,
    )
    from internal.protocol.a2a.model._a2a import (
        LEGACY_CARD_PATH as LEGACY_CARD_PATH,
    )
    from internal.protocol.a2a.model._a2a import (
        LEGACY_VERSION as LEGACY_VERSION,
    )
    from internal.protocol.a2a.model._a2a import (
        MAX_PAGE_SIZE as MAX_PAGE_SIZE,
    )
    from internal.protocol.a2a.model._a2a import (
        PROTOCOL_VERSION as PROTOCOL_VERSION,
    )
    from internal.protocol.a2a.model._a2a import (
        VERSION_HEADER as VERSION_HEADER,
    )
    from internal.protocol.a2a.model._a2a import (
        WELL_KNOWN_CARD_PATH as WELL_KNOWN_CARD_PATH,
    )
    from internal.protocol.a2a.model._a2a import (
        CardInfo as CardInfo,
    )
    from internal.protocol.a2a.model._a2a import (
        ExtensionInfo as ExtensionInfo,
    )
    from internal.protocol.a2a.model._a2a import (
        ListQuery as ListQuery,
    )
    from internal.protocol.a2a.model._a2a import (
        SendParams as SendParams,
    )
    from internal.protocol.a2a.model._a2a import (
        SkillInfo as SkillInfo,
    )
    from internal.protocol.a2a.model._a2a import (
        history as history,
    )
    from internal.protocol.a2a.model._a2a import (
        interrupted_or_terminal as interrupted_or_terminal,
    )
    from internal.protocol.a2a.model._a2a import (
        message_fields as message_fields,
    )
    from internal.protocol.a2a.model._a2a import (
        reply_message as reply_message,
    )
    from internal.protocol.a2a.model._a2a import (
        requested_version as requested_version,
    )
    from internal.protocol.a2a.model._a2a import (
        status_message as status_message,
    )
    from internal.protocol.a2a.model._a2a import (
        task_artifacts as task_artifacts,
    )
    from internal.protocol.a2a.model._a2a import (
        trim_history as trim_history,
    )
    from internal.protocol.a2a.model._a2a import (
        version_matches as version_matches,
    )
    from internal.protocol.a2a.model._errors import (
        BUTLER_DOMAIN as BUTLER_DOMAIN,
    )
    from internal.protocol.a2a.model._errors import (
        ERROR_TABLE as ERROR_TABLE,
    )
    from internal.protocol.a2a.model._errors import (
        AuthError as AuthError,
    )
    from internal.protocol.a2a.model._errors import (
        ButlerError as ButlerError,
    )
    from internal.protocol.a2a.model._errors import (
        DelegationFailed as DelegationFailed,
    )
    from internal.protocol.a2a.model._errors import (
        ErrorSpec as ErrorSpec,
    )
    from internal.protocol.a2a.model._errors import (
        OutboundRefused as OutboundRefused,
    )
    from internal.protocol.a2a.model._errors import (
        Refusal as Refusal,
    )
    from internal.protocol.a2a.model._errors import (
        RequestError as RequestError,
    )
    from internal.protocol.a2a.model._errors import (
        SetupError as SetupError,
    )
    from internal.protocol.a2a.model._errors import (
        StateConflict as StateConflict,
    )
    from internal.protocol.a2a.model._errors import (
        TaskFailed as TaskFailed,
    )
    from internal.protocol.a2a.model._errors import (
        Unavailable as Unavailable,
    )
    from internal.protocol.a2a.model._errors import (
        code_for_http_status as code_for_http_status,
    )
    from internal.protocol.a2a.model._errors import (
        error_from_code as error_from_code,
    )
    from internal.protocol.a2a.model._identity import (
        Identity as Identity,
    )
    from internal.protocol.a2a.model._identity import (
        agent_key as agent_key,
    )
    from internal.protocol.a2a.model._task import (
        SCOPE_MARK as SCOPE_MARK,
    )
    from internal.protocol.a2a.model._task import (
        Artifact as Artifact,
    )
    from internal.protocol.a2a.model._task import (
        Budget as Budget,
    )
    from internal.protocol.a2a.model._task import (
        CostNode as CostNode,
    )
    from internal.protocol.a2a.model._task import (
        Envelope as Envelope,
    )
    from internal.protocol.a2a.model._task import (
        Message as Message,
    )
    from internal.protocol.a2a.model._task import (
        Part as Part,
    )
    from internal.protocol.a2a.model._task import (
        PushConfig as PushConfig,
    )
    from internal.protocol.a2a.model._task import (
        StatusEntry as StatusEntry,
    )
    from internal.protocol.a2a.model._task import (
        Task as Task,
    )
    from internal.protocol.a2a.model._task import (
        TaskError as TaskError,
    )
    from internal.protocol.a2a.model._task import (
        TaskEvent as TaskEvent,
    )
    from internal.protocol.a2a.model._task import (
        TaskPage as TaskPage,
    )
    from internal.protocol.a2a.model._task import (
        TaskRequest as TaskRequest,
    )
    from internal.protocol.a2a.model._task import (
        TaskState as TaskState,
    )
    from internal.protocol.a2a.model._task import (
        media_type_matches as media_type_matches,
    )
    from internal.protocol.a2a.model._task import (
        scoped_task_id as scoped_task_id,
    )
    from internal.protocol.a2a.model._task import (
        wire_task_id as wire_task_id,
    )

# Each name is imported from its module on first use (internal/lazy_exports.py).
__all__, _getattr = lazy_exports(__name__, {
    "_a2a": (
        "DEFAULT_PAGE_SIZE", "JSONRPC_PATH", "LEGACY_CARD_PATH", "LEGACY_VERSION", "MAX_PAGE_SIZE",
        "PROTOCOL_VERSION", "VERSION_HEADER", "WELL_KNOWN_CARD_PATH", "CardInfo", "ExtensionInfo",
        "ListQuery", "SendParams", "SkillInfo", "history", "interrupted_or_terminal",
        "message_fields", "reply_message", "requested_version", "status_message", "task_artifacts",
        "trim_history", "version_matches",
    ),
    "_errors": (
        "BUTLER_DOMAIN", "ERROR_TABLE", "AuthError", "ButlerError", "DelegationFailed",
        "ErrorSpec", "OutboundRefused", "Refusal", "RequestError", "SetupError", "StateConflict",
        "TaskFailed", "Unavailable", "code_for_http_status", "error_from_code",
    ),
    "_identity": ("Identity", "agent_key",),
    "_task": (
        "SCOPE_MARK", "Artifact", "Budget", "CostNode", "Envelope", "Message", "Part",
        "PushConfig", "StatusEntry", "Task", "TaskError", "TaskEvent", "TaskPage", "TaskRequest",
        "TaskState", "media_type_matches", "scoped_task_id", "wire_task_id",
    ),
})
if not TYPE_CHECKING:
    __getattr__ = _getattr
