"""The API against its own OpenAPI schema, driven by schemathesis: for every operation,
generated requests (valid and invalid) never get a 5xx, and every response matches what the
schema says — status code, content type, body."""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import checks
from schemathesis.config._checks import NEGATIVE_DATA_REJECTION_EXPECTED_STATUSES, NegativeDataRejectionConfig

from config.wsgi import application
from tests.django_fixtures import Caller

schema = schemathesis.openapi.from_wsgi("/api/schema", application).exclude(path_regex=r"(/events$|/docs$|/schema$)")
# The key is the test's (alice's): the generated requests neither send nor drop it.
schema.config.generation.update(with_security_parameters=False)
# A body over the size limit is rejected with 413: a rejection like the others.
schema.config.checks.negative_data_rejection = NegativeDataRejectionConfig(
    expected_statuses=[*NEGATIVE_DATA_REJECTION_EXPECTED_STATUSES, "413"]
)


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_api_matches_its_schema(case: Any, alice: Caller) -> None:
    case.call_and_validate(
        headers={"Authorization": f"Bearer {alice.key}"},
        # A well-formed id of an object that does not exist is rightly 404, a schema-valid
        # question over a limit rightly 4xx: "valid data is accepted" cannot hold here.
        excluded_checks=[checks.positive_data_acceptance],
    )


def test_the_schema_is_generated_without_a_warning(tmp_path: Any) -> None:
    """Colliding component names or an undescribed authenticator would make the schema above lie."""
    from django.core.management import call_command

    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"))
