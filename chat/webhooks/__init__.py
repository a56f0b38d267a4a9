"""Webhooks: a signed ``run.completed`` event to the caller's URL when a run ends.

``targets`` says where a webhook may go (SSRF rules), ``signing`` keeps and uses the secrets
(Standard Webhooks), ``delivery`` makes one attempt, ``services`` creates deliveries when a run
ends and schedules their attempts.
"""
