from django.apps import AppConfig


class ClientsConfig(AppConfig):
    name = "clients"
    label = "clients"
    verbose_name = "API clients"
