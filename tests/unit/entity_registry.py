"""A new user's own schema for the entity tests (not the campus): orders with their
customer (many-to-one) and items (one-to-many); persons with a status (one-to-one),
accounts with their owner (many-to-one) and e-mail addresses (one-to-many). A format
template: ``{src}``, ``{schema}``, ``{slot}`` and the listeners' part ``{listeners}``."""

SHOP = """
sources:
  - {{name: {src}, schemas: [{schema}], slot: {slot}, publication: {slot}}}
tables:
  - tname: CUSTOMER
    feeds:
      - {{source: {src}, table: {schema}.customers, keys: {{pkey_number: id}}, columns: [id, name, country]}}
  - tname: ORDERS
    feeds:
      - source: {src}
        table: {schema}.orders
        keys: {{pkey_number: id}}
        columns: [id, customer_id, orderregion, ordertype, total]
  - tname: ITEM
    feeds:
      - {{source: {src}, table: {schema}.items, keys: {{pkey_number: id}}, columns: [id, order_id, sku, qty]}}
  - tname: PERSON
    feeds:
      - {{source: {src}, table: {schema}.persons, keys: {{person_id: id}}, columns: [id, name, kind]}}
  - tname: PERSON
    subtype: Status
    feeds:
      - {{source: {src}, table: {schema}.person_status, keys: {{person_id: person_id}}, columns: [person_id, status]}}
  - tname: ACCOUNT
    feeds:
      - {{source: {src}, table: {schema}.accounts, keys: {{pkey_string: uname}}, columns: [uname, owner_id, quota]}}
  - tname: EMAIL
    feeds:
      - {{source: {src}, table: {schema}.emails, keys: {{pkey_string: address}}, columns: [address, uname, kind]}}
  - tname: ORDER_VIEW
    entity:
      root: ORDERS
      joins:
        - {{name: customer, table: CUSTOMER, kind: many-to-one, match: {{pkey_number: customer_id}}}}
        - {{name: items, table: ITEM, kind: one-to-many, match: {{order_id: pkey_number}}, columns: [sku, qty]}}
  - tname: MAILBOX
    entity:
      root: ACCOUNT
      joins:
        - {{name: owner, table: PERSON, kind: many-to-one, match: {{person_id: owner_id}}}}
        - {{name: status, table: PERSON/Status, kind: one-to-one, match: {{person_id: person_id}}, via: owner}}
        - {{name: addresses, table: EMAIL, kind: one-to-many, match: {{uname: pkey_string}}}}
  - tname: PERSON_VIEW
    entity:
      root: PERSON
      joins:
        - {{name: status, table: PERSON/Status, kind: one-to-one, match: {{person_id: person_id}}}}
{listeners}
"""

# AQ's BooksOnLine rules (Oracle AQ guide), over the order's customer, exactly as written there
EAST = "orderregion = 'EASTERN' OR (ordertype = 'RUSH' AND customer.country = 'USA')"
WEST = "orderregion = 'WESTERN' AND ordertype != 'RUSH'"
OVERSEAS = "customer.country != 'USA'"
ACTIVE = "status.status = 'active'"
