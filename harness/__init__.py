"""SuperBizAgent's agent harness: plain Python, no framework imports (ports and adapters).

Read ``application.py`` first: ``ChatApplication.execute`` is the whole chain of one run.
"""
