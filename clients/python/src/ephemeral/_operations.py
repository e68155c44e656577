"""Every operation of docs/openapi.yaml, by its operationId: the method and path the client sends.

The client builds each request from this table, and tests/test_coverage.py (with
tests/blackbox/client_coverage.py) fails when the document has an operation the table lacks (or
the other way round), or when a method of the client does not send the request its row names.
A new endpoint is a row here and a method on its resource.
"""

from typing import Dict, Tuple

OPERATIONS: Dict[str, Tuple[str, str]] = {
    "createRun": ("POST", "/v1/runs"),
    "listRuns": ("GET", "/v1/runs"),
    "listRunsHead": ("HEAD", "/v1/runs"),
    "getRun": ("GET", "/v1/runs/{id}"),
    "getRunHead": ("HEAD", "/v1/runs/{id}"),
    "listRunEvents": ("GET", "/v1/runs/{id}/events"),
    "listRunEventsHead": ("HEAD", "/v1/runs/{id}/events"),
    "getRunTranscript": ("GET", "/v1/runs/{id}/transcript"),
    "getRunTranscriptHead": ("HEAD", "/v1/runs/{id}/transcript"),
    "cancelRun": ("POST", "/v1/runs/{id}/cancel"),
    "getBalance": ("GET", "/v1/balance"),
    "getBalanceHead": ("HEAD", "/v1/balance"),
    "listModels": ("GET", "/v1/models"),
    "listModelsHead": ("HEAD", "/v1/models"),
    "addCredit": ("POST", "/v1/credits"),
    "createKey": ("POST", "/v1/keys"),
    "listKeys": ("GET", "/v1/keys"),
    "listKeysHead": ("HEAD", "/v1/keys"),
    "revokeKey": ("DELETE", "/v1/keys/{id}"),
    "createConnection": ("POST", "/v1/connections"),
    "listConnections": ("GET", "/v1/connections"),
    "listConnectionsHead": ("HEAD", "/v1/connections"),
    "getConnection": ("GET", "/v1/connections/{name}"),
    "getConnectionHead": ("HEAD", "/v1/connections/{name}"),
    "deleteConnection": ("DELETE", "/v1/connections/{name}"),
    "createImage": ("POST", "/v1/images"),
    "listImages": ("GET", "/v1/images"),
    "listImagesHead": ("HEAD", "/v1/images"),
    "getImage": ("GET", "/v1/images/{name}"),
    "getImageHead": ("HEAD", "/v1/images/{name}"),
    "deleteImage": ("DELETE", "/v1/images/{name}"),
    "getImageLog": ("GET", "/v1/images/{name}/log"),
    "getImageLogHead": ("HEAD", "/v1/images/{name}/log"),
    "createWebhook": ("POST", "/v1/webhooks"),
    "listWebhooks": ("GET", "/v1/webhooks"),
    "listWebhooksHead": ("HEAD", "/v1/webhooks"),
    "getWebhook": ("GET", "/v1/webhooks/{id}"),
    "getWebhookHead": ("HEAD", "/v1/webhooks/{id}"),
    "deleteWebhook": ("DELETE", "/v1/webhooks/{id}"),
    "listWebhookDeliveries": ("GET", "/v1/webhooks/{id}/deliveries"),
    "listWebhookDeliveriesHead": ("HEAD", "/v1/webhooks/{id}/deliveries"),
    "getWebhookDelivery": ("GET", "/v1/webhooks/{id}/deliveries/{event_id}"),
    "getWebhookDeliveryHead": ("HEAD", "/v1/webhooks/{id}/deliveries/{event_id}"),
    "health": ("GET", "/healthz"),
    "healthHead": ("HEAD", "/healthz"),
    "metrics": ("GET", "/metrics"),
    "metricsHead": ("HEAD", "/metrics"),
}
