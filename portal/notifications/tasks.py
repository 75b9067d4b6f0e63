from celery import shared_task

from portal.notifications import delivery


@shared_task(acks_late=True, soft_time_limit=30)
def notify(notice: dict) -> list[int]:
    """Turn one tenant event into deliveries and mail; send the deliveries."""
    created = delivery.fan_out(notice)
    for delivery_id in created:
        deliver.delay(delivery_id)
    return created


@shared_task(acks_late=True, soft_time_limit=30)
def deliver(delivery_id: int) -> None:
    """Try a delivery; schedule the next try when it failed and has tries left."""
    wait = delivery.send(delivery_id)
    if wait is not None:
        deliver.apply_async((delivery_id,), countdown=wait)


@shared_task(soft_time_limit=30, expires=60)
def resume_deliveries() -> list[int]:
    """Beat, every minute: tries that a worker should have made and did not."""
    overdue = delivery.due()
    for delivery_id in overdue:
        deliver.delay(delivery_id)
    return overdue
