package shop

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Demo identifies the demo shop data.
type Demo struct {
	UserID   int64
	OptionID int64
}

// SeedDemo creates a demo user and a product with two options (stock 100
// and 20) unless they exist; running it again changes nothing.
func SeedDemo(ctx context.Context, pool *pgxpool.Pool) (Demo, error) {
	var d Demo
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('holdfast demo shop'))`); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, `SELECT o.id FROM product_options o WHERE o.option_code = 'DEMO-ETH-200'`).Scan(&d.OptionID)
		if errors.Is(err, pgx.ErrNoRows) {
			var product int64
			if err := tx.QueryRow(ctx, `INSERT INTO products (name) VALUES ('Ethiopia Yirgacheffe G1') RETURNING id`).Scan(&product); err != nil {
				return err
			}
			for i, o := range []struct {
				code         string
				price, stock int
			}{{"DEMO-ETH-200", 18000, 100}, {"DEMO-ETH-500", 39000, 20}} {
				var id int64
				if err := tx.QueryRow(ctx, `INSERT INTO product_options (product_id, option_code, price) VALUES ($1, $2, $3) RETURNING id`,
					product, o.code, o.price).Scan(&id); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, `INSERT INTO inventory (product_option_id, stock_quantity) VALUES ($1, $2)`, id, o.stock); err != nil {
					return err
				}
				if i == 0 {
					d.OptionID = id
				}
			}
		} else if err != nil {
			return err
		}
		err = tx.QueryRow(ctx, `SELECT id FROM users WHERE name = 'demo shopper' ORDER BY id LIMIT 1`).Scan(&d.UserID)
		if errors.Is(err, pgx.ErrNoRows) {
			err = tx.QueryRow(ctx, `INSERT INTO users (name) VALUES ('demo shopper') RETURNING id`).Scan(&d.UserID)
		}
		return err
	})
	if err != nil {
		return Demo{}, fmt.Errorf("shop: seed demo: %w", err)
	}
	return d, nil
}
