"""RedisJSON's ``JSON.*`` on the ``ReJSON-RL`` type: documents, containers and the helpers they share.
"""
