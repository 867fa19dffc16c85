-- +goose Up
-- Shop (seed 002): users, products and options, inventory, carts, 30-minute
-- inventory reservations and orders. Amounts are integers in minor units.
CREATE TABLE users (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text        NOT NULL CHECK (name <> ''),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE products (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text        NOT NULL CHECK (name <> ''),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE product_options (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    product_id  bigint  NOT NULL REFERENCES products,
    option_code text    NOT NULL UNIQUE CHECK (option_code <> ''),
    price       bigint  NOT NULL CHECK (price >= 0),
    is_active   boolean NOT NULL DEFAULT true
);

CREATE TABLE inventory (
    product_option_id bigint PRIMARY KEY REFERENCES product_options,
    stock_quantity    integer     NOT NULL CHECK (stock_quantity >= 0),
    updated_at        timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE cart_items (
    user_id           bigint  NOT NULL REFERENCES users,
    product_option_id bigint  NOT NULL REFERENCES product_options,
    quantity          integer NOT NULL CHECK (quantity > 0),
    added_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, product_option_id)
);

CREATE TABLE orders (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id    bigint      NOT NULL REFERENCES users,
    total      bigint      NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE order_lines (
    order_id          bigint  NOT NULL REFERENCES orders,
    product_option_id bigint  NOT NULL REFERENCES product_options,
    quantity          integer NOT NULL CHECK (quantity > 0),
    unit_price        bigint  NOT NULL,
    PRIMARY KEY (order_id, product_option_id)
);

CREATE TABLE inventory_reservations (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    product_option_id bigint      NOT NULL REFERENCES product_options,
    user_id           bigint      NOT NULL REFERENCES users,
    quantity          integer     NOT NULL CHECK (quantity > 0),
    status            text        NOT NULL CHECK (status IN ('RESERVED', 'CONFIRMED', 'RELEASED', 'EXPIRED')),
    order_id          bigint      REFERENCES orders,
    reserved_at       timestamptz NOT NULL,
    expires_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL DEFAULT now()
);
-- Seed 002 §4's indexes.
CREATE INDEX idx_inventory_reservation_product_option_status ON inventory_reservations (product_option_id, status);
CREATE INDEX idx_inventory_reservation_user_status_expires ON inventory_reservations (user_id, status, expires_at);
CREATE INDEX idx_inventory_reservation_expires_at ON inventory_reservations (expires_at);

-- +goose Down
DROP TABLE inventory_reservations;
DROP TABLE order_lines;
DROP TABLE orders;
DROP TABLE cart_items;
DROP TABLE inventory;
DROP TABLE product_options;
DROP TABLE products;
DROP TABLE users;
