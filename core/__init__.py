"""What every app's edge shares: the error types and their envelope, the strict serializer
helpers, pagination, the read-only admin and the checks before a management command starts.
It imports no app of this project."""
