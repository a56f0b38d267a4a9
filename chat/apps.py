from django.apps import AppConfig


class ChatConfig(AppConfig):
    name = "chat"
    verbose_name = "Chat API"

    def ready(self) -> None:
        from chat import schema  # noqa: F401 - registers the API key scheme with drf-spectacular
