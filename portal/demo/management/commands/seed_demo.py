from django.core.management.base import BaseCommand

from portal.demo import installation


class Command(BaseCommand):
    help = "Create the demo cluster, tenants, queues and jobs (does nothing if tenants exist)."

    def handle(self, *args, **options):
        if installation.seed():
            self.stdout.write(self.style.SUCCESS("Demo data created."))
        else:
            self.stdout.write("Tenants exist already; demo data left as it is.")
