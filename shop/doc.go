// Package shop is the commerce vertical (seed 002): users, products with
// options and stock, carts, and checkout — a 30-minute reservation of the
// whole cart (POST /orders/reserve), then the order that deducts stock
// (POST /orders) or the release (DELETE /orders/reserve).
//
// Reserve is an async write serialized on the user and on every product
// option in the cart (keys "shop:user:{id}", "shop:opt:{id}"), taken
// all-or-nothing in sorted order, so two carts holding the same options in
// opposite order never deadlock. Confirm and release hold the user's key:
// neither can lower any option's available stock.
//
// Decisions the seed leaves open: a reserve covers the cart as it was when
// the API accepted the request (that is what fixes its keys); "active" means
// RESERVED and not expired, so a confirmed order does not block the next
// checkout; availableStock = stock − Σ RESERVED quantities not yet expired
// (SPEC §5, the seed double-counts CONFIRMED rows); a confirmed order's
// lines leave the cart.
package shop
