from django.core.management.base import BaseCommand, CommandError

from portal.workloads.invariants import violations


class Command(BaseCommand):
    help = "Check what must hold between the database and the fleet; exit 1 on a violation."

    def handle(self, *args, **options):
        found = violations()
        for line in found:
            self.stderr.write(line)
        if found:
            raise CommandError(f"{len(found)} invariant violation(s)")
        self.stdout.write(self.style.SUCCESS("All invariants hold."))
