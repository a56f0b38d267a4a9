"""What every app's edge shares: the error types and their envelope, the strict serializer
helpers, pagination and the read-only admin. It imports no app of this project."""
