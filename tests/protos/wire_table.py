"""Independent restatement of conveyor.v1 from ../shared/spec/wire-schema.md.

Written by hand from the schema tables, NOT derived from our .proto files, so a
typo in either place shows up as a mismatch. Wire types: V = varint (int32,
int64, uint32, bool, enum), L = length-delimited (string, bytes, message, map,
packed repeated scalars), D = 64-bit (double).
"""

from __future__ import annotations

V, D, L = 0, 1, 2

# fmt: off

MESSAGES: dict[str, dict[str, tuple[int, int]]] = {
    # task.proto
    "TaskEnvelope": {
        "id": (1, L), "queue": (2, L), "type": (3, L), "payload": (4, L), "content_type": (5, L),
        "metadata": (6, L), "options": (7, L), "retried": (8, V), "last_error": (9, L),
        "enqueued_at": (10, L), "started_at": (11, L), "completed_at": (12, L), "progress": (13, V),
        "progress_message": (14, L),
    },
    "TaskOptions": {
        "max_retry": (1, V), "timeout": (2, L), "deadline": (3, L), "process_at": (4, L),
        "unique_key": (5, L), "unique_ttl": (6, L), "retention": (7, L), "priority": (8, V),
        "group": (9, L), "expires_at": (10, L), "depends_on": (11, L), "concurrency_key": (12, L),
        "retry_policy": (13, L),
    },
    "TaskDependency": {"task_id": (1, L), "on_failure": (2, V)},
    "RetryPolicy": {"strategy": (1, V), "base": (2, L), "max": (3, L)},
    "TaskEvent": {
        "id": (1, L), "queue": (2, L), "type": (3, L), "state": (4, V), "event_type": (5, V),
        "occurred_at": (6, L), "attempt": (7, V), "last_error": (8, L),
    },
    # service.proto — TaskService
    "EnqueueRequest": {
        "task_id": (1, L), "queue": (2, L), "type": (3, L), "payload": (4, L), "content_type": (5, L),
        "metadata": (6, L), "max_retry": (7, V), "timeout": (8, L), "deadline": (9, L),
        "process_at": (10, L), "process_in": (11, L), "unique_key": (12, L), "unique_ttl": (13, L),
        "priority": (14, V), "retention": (15, L), "group": (16, L), "expires_in": (17, L),
        "expires_at": (18, L), "depends_on": (19, L), "concurrency_key": (20, L), "retry_policy": (21, L),
    },
    "EnqueueResponse": {"task": (1, L)},
    "EnqueueBatchRequest": {"tasks": (1, L)},
    "EnqueueBatchResponse": {"results": (1, L)},
    "EnqueueResult": {"task": (1, L), "error": (2, L)},
    "EnqueueTxRequest": {"tasks": (1, L)},
    "EnqueueTxResponse": {"tasks": (1, L)},
    "GetTaskRequest": {"id": (1, L)},
    "GetTaskResponse": {"task": (1, L)},
    "TaskInfo": {
        "id": (1, L), "queue": (2, L), "type": (3, L), "state": (4, V), "priority": (5, V),
        "retried": (6, V), "max_retry": (7, V), "last_error": (8, L), "enqueued_at": (9, L),
        "process_at": (10, L), "completed_at": (11, L), "payload": (12, L), "content_type": (13, L),
        "started_at": (14, L), "progress": (15, V), "progress_message": (16, L),
    },
    # WorkerService
    "WorkerMessage": {
        "hello": (1, L), "credit": (2, L), "result": (3, L), "heartbeat": (4, L),
        "batch_result": (5, L), "progress": (6, L),
    },
    "ServerMessage": {
        "welcome": (1, L), "dispatch": (2, L), "cancel": (3, L), "ping": (4, L), "batch_dispatch": (5, L),
    },
    "Hello": {
        "queues": (1, L), "concurrency": (2, V), "labels": (3, L), "sdk_version": (4, L),
        "min_server_version": (5, L), "batch_types": (6, L),
    },
    "Credit": {"n": (1, V)},
    "Result": {"task_id": (1, L), "outcome": (2, V), "error_msg": (3, L), "result": (4, L)},
    "Heartbeat": {"active_task_ids": (1, L)},
    "Progress": {"task_id": (1, L), "percent": (2, V), "message": (3, L)},
    "BatchResult": {"results": (1, L)},
    "Welcome": {
        "session_id": (1, L), "lease_ttl": (2, L), "heartbeat_interval": (3, L), "server_version": (4, L),
        "min_sdk_version": (5, L),
    },
    "Dispatch": {"task": (1, L), "deadline": (2, L)},
    "BatchDispatch": {"tasks": (1, L), "deadline": (2, L), "group": (3, L)},
    "Cancel": {"task_id": (1, L)},
    "Ping": {},
    # WebhookService
    "WebhookHeartbeatRequest": {"lease_token": (1, L)},
    "WebhookHeartbeatResponse": {},
    "WebhookReportResultRequest": {
        "lease_token": (1, L), "outcome": (2, V), "error_msg": (3, L), "result": (4, L),
    },
    "WebhookReportResultResponse": {},
    # AdminService
    "ListQueuesRequest": {},
    "ListQueuesResponse": {"queues": (1, L)},
    "QueueInfo": {
        "name": (1, L), "paused": (2, V), "scheduled": (3, V), "pending": (4, V), "active": (5, V),
        "retry": (6, V), "completed": (7, V), "archived": (8, V), "aggregating": (9, V), "blocked": (10, V),
    },
    "PauseQueueRequest": {"queue": (1, L)},
    "PauseQueueResponse": {},
    "ResumeQueueRequest": {"queue": (1, L)},
    "ResumeQueueResponse": {},
    "RateLimitInfo": {"queue": (1, L), "rate_per_sec": (2, D), "burst": (3, V)},
    "ListRateLimitsRequest": {},
    "ListRateLimitsResponse": {"limits": (1, L)},
    "SetQueueRateLimitRequest": {"queue": (1, L), "rate_per_sec": (2, D), "burst": (3, V)},
    "SetQueueRateLimitResponse": {},
    "DeleteQueueRateLimitRequest": {"queue": (1, L)},
    "DeleteQueueRateLimitResponse": {},
    "ConcurrencyLimitInfo": {"queue": (1, L), "max_active": (2, V)},
    "ListConcurrencyLimitsRequest": {},
    "ListConcurrencyLimitsResponse": {"limits": (1, L)},
    "SetQueueConcurrencyLimitRequest": {"queue": (1, L), "max_active": (2, V)},
    "SetQueueConcurrencyLimitResponse": {},
    "DeleteQueueConcurrencyLimitRequest": {"queue": (1, L)},
    "DeleteQueueConcurrencyLimitResponse": {},
    "GroupConfigInfo": {
        "queue": (1, L), "group": (2, L), "max_size": (3, V), "max_delay": (4, L), "grace_period": (5, L),
    },
    "ListGroupConfigsRequest": {},
    "ListGroupConfigsResponse": {"configs": (1, L)},
    "SetGroupConfigRequest": {
        "queue": (1, L), "group": (2, L), "max_size": (3, V), "max_delay": (4, L), "grace_period": (5, L),
    },
    "SetGroupConfigResponse": {},
    "DeleteGroupConfigRequest": {"queue": (1, L), "group": (2, L)},
    "DeleteGroupConfigResponse": {},
    "ListTasksRequest": {"queue": (1, L), "state": (2, V), "limit": (3, V), "page_token": (4, L)},
    "ListTasksResponse": {"tasks": (1, L), "next_page_token": (2, L)},
    "CancelTaskRequest": {"id": (1, L)},
    "CancelTaskResponse": {},
    "DeleteTaskRequest": {"id": (1, L)},
    "DeleteTaskResponse": {},
    "RunTaskRequest": {"id": (1, L)},
    "RunTaskResponse": {},
    "RescheduleTaskRequest": {"id": (1, L), "process_at": (2, L), "process_in": (3, L)},
    "RescheduleTaskResponse": {},
    "ArchiveTaskRequest": {"id": (1, L)},
    "ArchiveTaskResponse": {},
    "BatchTasksRequest": {"ids": (1, L)},
    "BatchTasksResponse": {"results": (1, L)},
    "TaskActionResult": {"id": (1, L), "error": (2, L)},
    "CronEntry": {
        "id": (1, L), "spec": (2, L), "task_type": (3, L), "queue": (4, L), "payload": (5, L),
        "content_type": (6, L), "options": (7, L), "paused": (8, V), "next_run_at": (9, L),
    },
    "ListCronRequest": {},
    "ListCronResponse": {"entries": (1, L)},
    "UpsertCronRequest": {"entry": (1, L)},
    "UpsertCronResponse": {},
    "PauseCronRequest": {"id": (1, L)},
    "PauseCronResponse": {},
    "ResumeCronRequest": {"id": (1, L)},
    "ResumeCronResponse": {},
    "DeleteCronRequest": {"id": (1, L)},
    "DeleteCronResponse": {},
    "ClusterInfoRequest": {},
    "ClusterInfoResponse": {"nodes": (1, L)},
    "NodeInfo": {"address": (1, L), "started_at": (2, L)},
    "ListWorkerSessionsRequest": {},
    "ListWorkerSessionsResponse": {"sessions": (1, L)},
    "WorkerSession": {
        "id": (1, L), "queues": (2, L), "concurrency": (3, V), "sdk_version": (4, L), "connected_at": (5, L),
    },
    "BrokerInfoRequest": {},
    "BrokerInfoResponse": {"driver": (1, L), "metrics": (2, L)},
    "WatchEventsRequest": {"queues": (1, L), "event_types": (2, L)},
    "WebhookWorker": {
        "name": (1, L), "url": (2, L), "queues": (3, L), "concurrency": (4, V), "secrets": (5, L),
        "batch_types": (6, L), "request_timeout": (7, L), "paused": (8, V),
    },
    "ListWebhookWorkersRequest": {},
    "ListWebhookWorkersResponse": {"workers": (1, L)},
    "UpsertWebhookWorkerRequest": {"worker": (1, L)},
    "UpsertWebhookWorkerResponse": {},
    "PauseWebhookWorkerRequest": {"name": (1, L)},
    "PauseWebhookWorkerResponse": {},
    "ResumeWebhookWorkerRequest": {"name": (1, L)},
    "ResumeWebhookWorkerResponse": {},
    "DeleteWebhookWorkerRequest": {"name": (1, L)},
    "DeleteWebhookWorkerResponse": {},
}

ONEOFS = {"WorkerMessage": "frame", "ServerMessage": "frame"}

ENUMS: dict[str, list[str]] = {
    "TaskState": [
        "TASK_STATE_UNSPECIFIED", "TASK_STATE_SCHEDULED", "TASK_STATE_PENDING", "TASK_STATE_ACTIVE",
        "TASK_STATE_RETRY", "TASK_STATE_COMPLETED", "TASK_STATE_ARCHIVED", "TASK_STATE_CANCELED",
        "TASK_STATE_AGGREGATING", "TASK_STATE_BLOCKED",
    ],
    "TaskOutcome": [
        "TASK_OUTCOME_UNSPECIFIED", "TASK_OUTCOME_SUCCESS", "TASK_OUTCOME_RETRY", "TASK_OUTCOME_SKIP_RETRY",
        "TASK_OUTCOME_RELEASED",
    ],
    "DependencyFailurePolicy": [
        "DEPENDENCY_FAILURE_POLICY_UNSPECIFIED", "DEPENDENCY_FAILURE_POLICY_BLOCK",
        "DEPENDENCY_FAILURE_POLICY_CASCADE_CANCEL", "DEPENDENCY_FAILURE_POLICY_CONTINUE",
    ],
    "RetryStrategy": [
        "RETRY_STRATEGY_UNSPECIFIED", "RETRY_STRATEGY_EXPONENTIAL", "RETRY_STRATEGY_LINEAR",
        "RETRY_STRATEGY_FIXED",
    ],
    "TaskEventType": [
        "TASK_EVENT_TYPE_UNSPECIFIED", "TASK_EVENT_TYPE_ENQUEUED", "TASK_EVENT_TYPE_SCHEDULED",
        "TASK_EVENT_TYPE_LEASED", "TASK_EVENT_TYPE_COMPLETED", "TASK_EVENT_TYPE_RETRIED",
        "TASK_EVENT_TYPE_ARCHIVED", "TASK_EVENT_TYPE_CANCELED", "TASK_EVENT_TYPE_RELEASED",
    ],
}  # value number = list index

# (service, method) -> (request, response, client_streaming, server_streaming)
RPCS: dict[tuple[str, str], tuple[str, str, bool, bool]] = {
    ("TaskService", "Enqueue"): ("EnqueueRequest", "EnqueueResponse", False, False),
    ("TaskService", "EnqueueBatch"): ("EnqueueBatchRequest", "EnqueueBatchResponse", False, False),
    ("TaskService", "EnqueueTx"): ("EnqueueTxRequest", "EnqueueTxResponse", False, False),
    ("TaskService", "GetTask"): ("GetTaskRequest", "GetTaskResponse", False, False),
    ("WorkerService", "Session"): ("WorkerMessage", "ServerMessage", True, True),
    ("WebhookService", "Heartbeat"): ("WebhookHeartbeatRequest", "WebhookHeartbeatResponse", False, False),
    ("WebhookService", "ReportResult"): (
        "WebhookReportResultRequest", "WebhookReportResultResponse", False, False,
    ),
    ("AdminService", "WatchEvents"): ("WatchEventsRequest", "TaskEvent", False, True),
    **{
        ("AdminService", name): (f"{name}Request", f"{name}Response", False, False)
        for name in (
            "ListQueues", "PauseQueue", "ResumeQueue", "ListRateLimits", "SetQueueRateLimit",
            "DeleteQueueRateLimit", "ListConcurrencyLimits", "SetQueueConcurrencyLimit",
            "DeleteQueueConcurrencyLimit", "ListGroupConfigs", "SetGroupConfig", "DeleteGroupConfig",
            "ListTasks", "CancelTask", "DeleteTask", "RunTask", "RescheduleTask", "ArchiveTask", "ListCron",
            "UpsertCron", "PauseCron", "ResumeCron", "DeleteCron", "ClusterInfo", "ListWorkerSessions",
            "BrokerInfo", "ListWebhookWorkers", "UpsertWebhookWorker", "PauseWebhookWorker",
            "ResumeWebhookWorker", "DeleteWebhookWorker",
        )
    },
    **{
        ("AdminService", name): ("BatchTasksRequest", "BatchTasksResponse", False, False)
        for name in ("BatchDeleteTasks", "BatchRunTasks", "BatchCancelTasks", "BatchArchiveTasks")
    },
}
# fmt: on
