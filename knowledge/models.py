"""Documents, chunks, runbooks and logs arrive here with the evidence backends."""
