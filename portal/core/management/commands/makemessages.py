"""Django's makemessages, also extracting the sentences made by `scheduler.words.phrase`."""

from django.core.management.commands import makemessages


class Command(makemessages.Command):
    xgettext_options = [*makemessages.Command.xgettext_options, "--keyword=phrase"]
