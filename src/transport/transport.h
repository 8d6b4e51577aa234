/*
 * The transports of this build, each implementing core/conn.h's
 * interface; transport.c lists them for the core in hoop__transports.
 */
#ifndef HOOP_TRANSPORT_H
#define HOOP_TRANSPORT_H

#include "core/conn.h"

extern const struct hoop_transport_ops hoop__shm_transport;
extern const struct hoop_transport_ops hoop__tcp_transport;
extern const struct hoop_transport_ops hoop__ib_transport;

#endif /* HOOP_TRANSPORT_H */
