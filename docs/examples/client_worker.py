"""A Baton external-task worker with baton.client: invoices for orders (docs/client.md)."""
from baton.client import BpmnError, Client, ExternalTaskWorker

client = Client.from_environment()  # BATON_URL and BATON_API_KEY (a key with external.*)
worker = ExternalTaskWorker(client, "invoicer-1", threads=4, lock_duration_ms=60_000)


@worker.subscribe("invoiceCreator")
def create_invoice(task):
    order_id = task.variables["order_id"]  # a missing one raises: a failure, retried, then an incident
    if order_id <= 0:  # a business outcome: the task's error boundary event with this code takes it
        raise BpmnError("INVALID_ORDER", f"There is no order {order_id}.")
    return {"invoice": f"INV-{order_id}"}  # completes the task; these become the instance's variables


worker.run()  # until SIGTERM or Ctrl-C: the running handlers finish and report first
