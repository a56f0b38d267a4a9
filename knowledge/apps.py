from django.apps import AppConfig
from django.conf import settings


class KnowledgeConfig(AppConfig):
    name = "knowledge"
    verbose_name = "Knowledge and evidence"

    def ready(self) -> None:
        # numpy's BLAS starts a thread per core for every product. In a service that already runs
        # several web and worker processes per core, those threads only contend: one each is faster.
        threads = int(getattr(settings, "COMPUTE_THREADS", 1))
        if threads > 0:
            from threadpoolctl import threadpool_limits

            threadpool_limits(limits=threads, user_api="blas")
